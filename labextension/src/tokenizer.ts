/**
 * Tokenizer for the autocomp tensor-IR DSL (docs/guide/dsl.md) and the `%%autocomp`
 * magic line. Pure: no JupyterLab or CodeMirror imports, so plain node can
 * test it against the compiled `lib/tokenizer.js`.
 *
 * The DSL is line-oriented (one statement per line, `#` comments to the end
 * of the line), so tokenizing is per line and needs no state between lines.
 * Only what the highlighter colours becomes a token; tensor names and
 * punctuation are left plain.
 */

/** What a highlighted span is; `cm-autocomp-<type>` is its CSS class. */
export type TokenType =
  | 'magic' // `%%autocomp`
  | 'flag' // `--target`, `--tune` on the magic line
  | 'flag-value' // `tpu`, `my_target.yaml` after a flag
  | 'comment' // `# ...`
  | 'keyword' // input param tensor output where
  | 'op' // library op: `matmul(`, `conv2d(`
  | 'function' // scalar function in a comprehension: `exp(`, `max(`
  | 'dtype' // f32 f16 bf16 i8 i32
  | 'index' // index names inside `[...]` and after `where`
  | 'attribute' // keyword attribute of a library op: `stride=`
  | 'number'
  | 'operator'; // = += max= + - * / < <= > >=

/** A highlighted span of one line: [start, end) in UTF-16 code units. */
export type Token = [start: number, end: number, type: TokenType];

/** Words that start a declaration line. */
export const DECLARATION_KEYWORDS: ReadonlySet<string> = new Set([
  'input',
  'param',
  'tensor',
  'output'
]);

/** `where` bounds an index (`where r < 3`) anywhere in a statement. */
export const KEYWORDS: ReadonlySet<string> = new Set([
  ...DECLARATION_KEYWORDS,
  'where'
]);

/** Library ops (docs/guide/dsl.md table). */
export const LIBRARY_OPS: ReadonlySet<string> = new Set([
  'matmul',
  'batch_matmul',
  'linear',
  'conv2d',
  'depthwise_conv2d',
  'relu',
  'relu6',
  'gelu',
  'sigmoid',
  'tanh',
  'exp',
  'add',
  'sub',
  'mul',
  'bias_add',
  'batchnorm',
  'layernorm',
  'softmax',
  'maxpool2d',
  'avgpool2d',
  'global_avgpool',
  'transpose',
  'div',
  'erf',
  'reshape',
  'flatten',
  'concat'
]);

/** Scalar functions allowed in comprehension expressions. */
export const FUNCTIONS: ReadonlySet<string> = new Set([
  'exp',
  'sqrt',
  'tanh',
  'sigmoid',
  'relu',
  'gelu',
  'abs',
  'max',
  'min',
  'log',
  'pow',
  'floor',
  'less',
  'less_equal',
  'equal',
  'select'
]);

export const DTYPES: ReadonlySet<string> = new Set([
  'f32',
  'f16',
  'bf16',
  'i8',
  'i32'
]);

/** The first word of a `%%autocomp` cell. */
export const MAGIC = '%%autocomp';

const IDENTIFIER = /[A-Za-z_][A-Za-z0-9_]*/y;
const NUMBER = /(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?/y;
// Longest first, so `+=` wins over `+` and `<=` over `<`.
const OPERATOR = /\+=|<=|>=|[=+\-*/<>]/y;
const WHITESPACE = /\s*/y;
// A comprehension statement starts with an indexed tensor: `S[i, j] ...`.
const COMPREHENSION_START = /^\s*[A-Za-z_][A-Za-z0-9_]*\s*\[/;

/** Whether `text` starts a `%%autocomp` cell (its first line). */
export function isAutocompCell(text: string): boolean {
  const firstLine = text.split('\n', 1)[0].trimStart();
  return (
    firstLine.startsWith(MAGIC) &&
    (firstLine.length === MAGIC.length || /\s/.test(firstLine[MAGIC.length]))
  );
}

/** Tokenize one line of a `%%autocomp` cell or an `.acir` file. */
export function tokenizeLine(line: string): Token[] {
  const trimmed = line.trimStart();
  if (trimmed.startsWith(MAGIC)) {
    return tokenizeMagicLine(line, line.length - trimmed.length);
  }
  return tokenizeStatement(line);
}

function matchAt(re: RegExp, text: string, pos: number): string | null {
  re.lastIndex = pos;
  const m = re.exec(text);
  return m && m[0].length > 0 ? m[0] : null;
}

function skipSpaces(text: string, pos: number): number {
  WHITESPACE.lastIndex = pos;
  WHITESPACE.exec(text);
  return WHITESPACE.lastIndex;
}

/** `%%autocomp --target tpu --tune 1000 --vis-graph out.dot`. */
function tokenizeMagicLine(line: string, start: number): Token[] {
  const tokens: Token[] = [[start, start + MAGIC.length, 'magic']];
  const word = /\S+/g;
  word.lastIndex = start + MAGIC.length;
  let m: RegExpExecArray | null;
  while ((m = word.exec(line)) !== null) {
    const from = m.index;
    const text = m[0];
    if (text.startsWith('--')) {
      // `--target=tpu` is also accepted by argparse.
      const eq = text.indexOf('=');
      if (eq < 0) {
        tokens.push([from, from + text.length, 'flag']);
      } else {
        tokens.push([from, from + eq, 'flag']);
        if (eq + 1 < text.length) {
          tokens.push([from + eq + 1, from + text.length, valueType(text.slice(eq + 1))]);
        }
      }
    } else {
      tokens.push([from, from + text.length, valueType(text)]);
    }
  }
  return tokens;
}

function valueType(text: string): TokenType {
  return /^\d+(\.\d*)?$/.test(text) ? 'number' : 'flag-value';
}

/** A declaration, library-op statement or comprehension statement. */
function tokenizeStatement(line: string): Token[] {
  const tokens: Token[] = [];
  const isComprehension = COMPREHENSION_START.test(line);
  // Open brackets, innermost last: '[' (indices) or '(' (call arguments).
  const brackets: string[] = [];
  let afterWhere = false;
  let firstWord = true;
  let pos = 0;

  while (pos < line.length) {
    const ch = line[pos];
    if (ch === '#') {
      tokens.push([pos, line.length, 'comment']);
      break;
    }
    if (/\s/.test(ch)) {
      pos++;
      continue;
    }
    if (ch === '[' || ch === '(') {
      brackets.push(ch);
      pos++;
      continue;
    }
    if (ch === ']' || ch === ')') {
      brackets.pop();
      pos++;
      continue;
    }

    const word = matchAt(IDENTIFIER, line, pos);
    if (word !== null) {
      const end = pos + word.length;
      const next = skipSpaces(line, end);
      const type = wordType(word, {
        firstWord,
        isComprehension,
        afterWhere,
        inIndices: brackets[brackets.length - 1] === '[',
        inCall: brackets.includes('('),
        nextChar: line[next] ?? '',
        nextTwo: line.slice(next, next + 2)
      });
      if (type === 'operator') {
        // `max=` is one reduction operator: cover the word and its '='.
        tokens.push([pos, next + 1, 'operator']);
        pos = next + 1;
      } else {
        if (type !== null) {
          tokens.push([pos, end, type]);
        }
        if (word === 'where') {
          afterWhere = true;
        }
        pos = end;
      }
      firstWord = false;
      continue;
    }

    const number = matchAt(NUMBER, line, pos);
    if (number !== null) {
      tokens.push([pos, pos + number.length, 'number']);
      pos += number.length;
      firstWord = false;
      continue;
    }

    const operator = matchAt(OPERATOR, line, pos);
    if (operator !== null) {
      tokens.push([pos, pos + operator.length, 'operator']);
      pos += operator.length;
      firstWord = false;
      continue;
    }

    // Punctuation (`,` `:`) and anything the parser will reject stays plain.
    pos++;
    firstWord = false;
  }
  return tokens;
}

interface IWordContext {
  firstWord: boolean;
  isComprehension: boolean;
  afterWhere: boolean;
  inIndices: boolean;
  inCall: boolean;
  nextChar: string;
  nextTwo: string;
}

function wordType(word: string, ctx: IWordContext): TokenType | null {
  const followedByAssign = ctx.nextChar === '=' && ctx.nextTwo !== '==';
  if (ctx.firstWord && DECLARATION_KEYWORDS.has(word)) {
    return 'keyword';
  }
  if (word === 'where') {
    return 'keyword';
  }
  if (DTYPES.has(word)) {
    return 'dtype';
  }
  if (word === 'max' && followedByAssign && !ctx.inCall && !ctx.inIndices) {
    return 'operator';
  }
  if (ctx.nextChar === '(') {
    // In a comprehension `exp(...)` is a scalar function; in `Y = exp(X)` it
    // is the library op (several names are both).
    if (ctx.isComprehension || ctx.inIndices) {
      return FUNCTIONS.has(word) ? 'function' : LIBRARY_OPS.has(word) ? 'op' : null;
    }
    return LIBRARY_OPS.has(word) ? 'op' : FUNCTIONS.has(word) ? 'function' : null;
  }
  if (ctx.inCall && !ctx.inIndices && followedByAssign) {
    return 'attribute';
  }
  if (ctx.inIndices || ctx.afterWhere) {
    return 'index';
  }
  return null;
}
