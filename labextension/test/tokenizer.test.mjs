// Unit tests for the DSL tokenizer, run with plain node against the compiled
// lib/tokenizer.js (build first: `npx tsc` or `jlpm build:lib`):
//   node --test test/
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';

// lib/ is ES-module output in a package without "type": "module" (webpack in
// the JupyterLab builder needs it that way). tokenizer.js imports nothing, so
// loading it from a data: URL runs it as a module on any node version,
// without relying on module-syntax detection.
const source = readFileSync(new URL('../lib/tokenizer.js', import.meta.url), 'utf8');
const { tokenizeLine, isAutocompCell, LIBRARY_OPS, FUNCTIONS, DTYPES } = await import(
  'data:text/javascript;base64,' + Buffer.from(source).toString('base64')
);

/** "type:text" for each token, in order. */
function spans(line) {
  return tokenizeLine(line).map(([start, end, type]) => `${type}:${line.slice(start, end)}`);
}

test('magic line with flags, values and --flag=value', () => {
  assert.deepEqual(spans('%%autocomp --target tpu --tune 1000 --seed 0 --vis-graph=out.dot'), [
    'magic:%%autocomp',
    'flag:--target',
    'flag-value:tpu',
    'flag:--tune',
    'number:1000',
    'flag:--seed',
    'number:0',
    'flag:--vis-graph',
    'flag-value:out.dot'
  ]);
  assert.deepEqual(spans('%%autocomp'), ['magic:%%autocomp']);
});

test('declarations: keyword, dtype, shape numbers, trailing comment', () => {
  assert.deepEqual(spans('input  X: f32[1, 64, 56, 56]          # activations (NCHW)'), [
    'keyword:input',
    'dtype:f32',
    'number:1',
    'number:64',
    'number:56',
    'number:56',
    'comment:# activations (NCHW)'
  ]);
  assert.deepEqual(spans('param  g: bf16[64]'), ['keyword:param', 'dtype:bf16', 'number:64']);
  assert.deepEqual(spans('tensor S: i8[64, 64]'), [
    'keyword:tensor',
    'dtype:i8',
    'number:64',
    'number:64'
  ]);
  assert.deepEqual(spans('output R, E'), ['keyword:output']);
});

test('every dtype is a dtype', () => {
  for (const dtype of ['f32', 'f16', 'bf16', 'i8', 'i32']) {
    assert.ok(DTYPES.has(dtype));
    assert.deepEqual(spans(`input A: ${dtype}[4]`), ['keyword:input', `dtype:${dtype}`, 'number:4']);
  }
});

test('comment lines, including a # inside what would be code', () => {
  assert.deepEqual(spans('# comments start with #'), ['comment:# comments start with #']);
  assert.deepEqual(spans('   # indented'), ['comment:# indented']);
});

test('library op statements: op name, keyword attributes, numbers', () => {
  assert.deepEqual(spans('Y = conv2d(X, W, stride=1, padding=1) # library op'), [
    'operator:=',
    'op:conv2d',
    'attribute:stride',
    'operator:=',
    'number:1',
    'attribute:padding',
    'operator:=',
    'number:1',
    'comment:# library op'
  ]);
  assert.deepEqual(spans('Z = layernorm(X, g, b, eps=1e-5)'), [
    'operator:=',
    'op:layernorm',
    'attribute:eps',
    'operator:=',
    'number:1e-5'
  ]);
  assert.deepEqual(spans('T = transpose(X, perm=[0, 2, 1])'), [
    'operator:=',
    'op:transpose',
    'attribute:perm',
    'operator:=',
    'number:0',
    'number:2',
    'number:1'
  ]);
});

test('every library op of DESIGN §3 is an op in an op statement', () => {
  const ops = [
    'matmul', 'batch_matmul', 'linear', 'conv2d', 'depthwise_conv2d', 'relu', 'relu6',
    'gelu', 'sigmoid', 'tanh', 'exp', 'add', 'sub', 'mul', 'bias_add', 'batchnorm',
    'layernorm', 'softmax', 'maxpool2d', 'avgpool2d', 'global_avgpool', 'transpose',
    'div', 'erf', 'reshape', 'flatten', 'concat'
  ];
  assert.equal(LIBRARY_OPS.size, ops.length);
  for (const op of ops) {
    assert.deepEqual(spans(`R = ${op}(X)`), ['operator:=', `op:${op}`]);
  }
});

test('comprehensions: indices, += and max=, functions', () => {
  assert.deepEqual(spans('S[i, j] += A[i, k] * B[k, j]'), [
    'index:i',
    'index:j',
    'operator:+=',
    'index:i',
    'index:k',
    'operator:*',
    'index:k',
    'index:j'
  ]);
  assert.deepEqual(spans('M[i]    max= S[i, j]'), [
    'index:i',
    'operator:max=',
    'index:i',
    'index:j'
  ]);
  assert.deepEqual(spans('E[i, j] = exp(S[i, j] - M[i])'), [
    'index:i',
    'index:j',
    'operator:=',
    'function:exp',
    'index:i',
    'index:j',
    'operator:-',
    'index:i'
  ]);
});

test('a name that is both an op and a function follows the statement kind', () => {
  assert.deepEqual(spans('R = relu(Z)'), ['operator:=', 'op:relu']);
  assert.deepEqual(spans('R[i] = relu(Z[i])'), [
    'index:i',
    'operator:=',
    'function:relu',
    'index:i'
  ]);
  for (const fn of FUNCTIONS) {
    assert.deepEqual(spans(`R[i] = ${fn}(Z[i])`)[2], `function:${fn}`);
  }
  assert.deepEqual(spans('R[i] = max(A[i], 0)'), [
    'index:i',
    'operator:=',
    'function:max',
    'index:i',
    'number:0'
  ]);
});

test('affine indices and where clauses', () => {
  const line = 'P[n, c, h, w] += X[n, c, h + r - 1, w + s - 1] * K[c, r, s]   # out-of-range reads are 0';
  const types = spans(line);
  assert.deepEqual(types.slice(4, 12), [
    'operator:+=',
    'index:n',
    'index:c',
    'index:h',
    'operator:+',
    'index:r',
    'operator:-',
    'number:1'
  ]);
  assert.equal(types.at(-1), 'comment:# out-of-range reads are 0');
  assert.deepEqual(spans('Q[i] += A[i + r] where r < 3').slice(-4), [
    'keyword:where',
    'index:r',
    'operator:<',
    'number:3'
  ]);
});

test('tensor names and punctuation stay plain; spans are in order and in range', () => {
  const line = 'C = matmul(A, B)';
  assert.deepEqual(spans(line), ['operator:=', 'op:matmul']);
  const tokens = tokenizeLine('P[n, c] += X[n, c, h + r - 1] * K[c, r]  # x');
  let last = 0;
  for (const [start, end] of tokens) {
    assert.ok(start >= last && end > start, `bad span ${start}-${end}`);
    last = end;
  }
});

test('isAutocompCell only accepts %%autocomp as the first line word', () => {
  assert.ok(isAutocompCell('%%autocomp --target tpu\ninput A: f32[4]'));
  assert.ok(isAutocompCell('%%autocomp'));
  assert.ok(isAutocompCell('  %%autocomp\n'));
  assert.ok(!isAutocompCell('%%autocompx\n'));
  assert.ok(!isAutocompCell('%%time\n%%autocomp'));
  assert.ok(!isAutocompCell('x = 1\n%%autocomp'));
  assert.ok(!isAutocompCell(''));
});
