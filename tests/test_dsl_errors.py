"""Malformed programs: every error names line:col, shows a caret, and says what was expected."""
import pytest

from autocomp_jupyter.dsl import load, parse
from autocomp_jupyter.errors import UserError

HEAD = "input A: f32[4, 8]\ninput B: f32[8, 16]\n"

# (program, expected line, expected col, a fragment of the message, a fragment of the hint or "")
CASES = [
    ("syntax_missing_colon", "input A f32[4]\nB = relu(A)\n", 1, 9, "expected ':'", ""),
    ("syntax_unclosed_call", HEAD + "C = relu(A\n", 3, 11, "expected ',' or ')'", ""),
    ("syntax_bad_operator", HEAD + "C[i, j] -= A[i, j]\n", 3, 9, "expected '=', '+=' or 'max='", ""),
    ("syntax_stray_character", HEAD + "C = relu(A) $\n", 3, 13, "unexpected character '$'", ""),
    ("syntax_bad_expression", HEAD + "C[i, k] = A[i, k] * * 2\n", 3, 21, "expected an expression", ""),
    ("syntax_trailing_tokens", HEAD + "C = relu(A) relu\n", 3, 13, "after the statement", "one statement per line"),
    ("syntax_keyword_typo", "inputs A: f32[4]\n", 1, 1, "unknown declaration keyword 'inputs'", "did you mean 'input'?"),
    ("unknown_op", HEAD + "C = matmull(A, B)\n", 3, 5, "unknown op 'matmull'", "did you mean 'matmul'?"),
    ("unknown_op_is_function", HEAD + "C = sqrt(A)\n", 3, 5, "unknown op 'sqrt'", "expression function"),
    ("unknown_function", HEAD + "C[i, k] = exq(A[i, k])\n", 3, 11, "unknown function 'exq'", "did you mean 'exp'?"),
    ("unknown_tensor", HEAD + "C = matmul(A, Bx)\n", 3, 15, "unknown tensor 'Bx'", "did you mean 'B'?"),
    ("unknown_tensor_in_access", HEAD + "C[i, j] += A[i, k] * Q[k, j]\n", 3, 22, "unknown tensor 'Q'", ""),
    ("repeated_name", HEAD + "C = relu(A)\nC = relu(B)\n", 4, 1, "'C' is already defined (first at line 3)", ""),
    ("repeated_input", HEAD + "input A: f32[2]\n", 3, 7, "'A' is already defined", ""),
    ("bad_dtype", "input A: f33[4]\nB = relu(A)\n", 1, 10, "unknown dtype 'f33'", "did you mean 'f32'?"),
    ("bad_dtype_far", "input A: float[4]\nB = relu(A)\n", 1, 10, "unknown dtype 'float'", "f32"),
    ("zero_dimension", "input A: f32[4, 0]\nB = relu(A)\n", 1, 17, "dimension 0 of 'A' must be positive", ""),
    ("negative_dimension", "input A: f32[-3]\nB = relu(A)\n", 1, 14, "dimension -3 of 'A' must be positive", ""),
    ("matmul_shape_mismatch", HEAD + "C = matmul(B, A)\n", 3, 15, "matmul inner dimensions differ", "16 vs 4"),
    ("add_shape_mismatch", HEAD + "C = add(A, B)\n", 3, 12, "shapes do not broadcast", "[4, 8]"),
    ("comprehension_shape_mismatch", HEAD + "C[i, j] += A[i, k] * B[j, k]\n", 3, 22,
     "index 'k' ranges over 8", "shape mismatch: 8 vs 16"),
    ("declared_shape_mismatch", HEAD + "tensor C: f32[4, 4]\nC = matmul(A, B)\n", 4, 1,
     "declared [4, 4] but matmul gives [4, 16]", "[4, 16] vs [4, 4]"),
    ("rank_mismatch", HEAD + "C[i, j] = A[i, j, 0]\n", 3, 11, "'A' has rank 2 but is indexed with 3 indices", "f32[4, 8]"),
    ("ambiguous_index", HEAD + "C[i, j] += A[i, j + r]\n", 3, 6, "cannot infer the range of index 'j'", "where j < N"),
    ("ambiguous_reduction_index", "input X: f32[8, 8]\nY[i] += X[i, i + r]\n", 2, 9, "cannot infer the range of index 'r'",
     "where r < N"),
    ("unknown_keyword", "input X: f32[1, 3, 8, 8]\nparam W: f32[4, 3, 3, 3]\nY = conv2d(X, W, strides=2)\n", 3, 18,
     "unknown keyword argument 'strides' for conv2d", "did you mean 'stride'?"),
    ("conv_weight_mismatch", "input X: f32[1, 3, 8, 8]\nparam W: f32[4, 5, 3, 3]\nY = conv2d(X, W)\n", 3, 15,
     "does not fit input", "expected weight [F, 3, R, S]"),
    ("wrong_operand_count", HEAD + "C = relu(A, B)\n", 3, 5, "relu takes 1 tensor operand, got 2", ""),
    ("reduction_index_with_assign", HEAD + "C[i] = A[i, k]\n", 3, 1, "index 'k' is not on the left-hand side", "'+='"),
    ("non_affine_index", HEAD + "C[i, k] = A[i * k, k]\n", 3, 15, "index expression is not affine", ""),
    ("tensor_without_indices", HEAD + "C[i, k] = A[i, k] + B\n", 3, 21, "tensor 'B' needs indices", ""),
    ("declared_never_defined", HEAD + "tensor T: f32[4]\nC = relu(A)\n", 3, 8, "declared but never defined", ""),
    ("used_before_defined", HEAD + "tensor T: f32[4, 8]\nC = relu(T)\nT = relu(A)\n", 4, 10,
     "'T' is used before it is defined", ""),
    ("output_unknown", HEAD + "C = relu(A)\noutput D\n", 4, 8, "unknown tensor 'D' in output", ""),
    ("output_is_input", HEAD + "C = relu(A)\noutput A\n", 4, 8, "'A' is an input", ""),
    ("repeated_lhs_index", HEAD + "C[i, i] = A[i, i]\n", 3, 6, "index 'i' appears twice", ""),
    ("bad_transpose_perm", HEAD + "C = transpose(A, perm=[0, 0])\n", 3, 18, "not a permutation", ""),
    ("softmax_axis", HEAD + "C = softmax(A, axis=5)\n", 3, 16, "softmax axis 5 is out of range", ""),
    ("pool_too_big", "input X: f32[1, 1, 2, 2]\nY = maxpool2d(X, kernel=3)\n", 2, 15, "output size would be 0", ""),
    ("bad_where", HEAD + "C[i] += A[i, k] where q < 3\n", 3, 23, "does not use", ""),
]


@pytest.mark.parametrize("name,src,line,col,message,hint", CASES, ids=[c[0] for c in CASES])
def test_error_points_at_the_problem(name, src, line, col, message, hint):
    with pytest.raises(UserError) as info:
        parse(src, "prog.acir")
    diags = info.value.diagnostics
    matching = [d for d in diags if message in d.message]
    assert matching, f"no diagnostic containing {message!r}; got {[d.message for d in diags]}"
    d = matching[0]
    assert (d.line, d.col) == (line, col), info.value.format()
    if hint:
        assert hint in d.hint, d.hint
    text = info.value.format()
    assert f"prog.acir:{line}:{col}: error:" in text
    # the source line and a caret under the column
    source_line = src.splitlines()[line - 1]
    assert "    " + source_line in text
    caret_line = text.splitlines()[text.splitlines().index("    " + source_line) + 1]
    assert caret_line.index("^") == 4 + col - 1


def test_all_errors_are_reported_at_once():
    src = "input A: f33[4]\nB = matmull(A)\nC[i] = exq(A[i])\nD = relu(Zz)\n"
    with pytest.raises(UserError) as info:
        parse(src)
    lines = [d.line for d in info.value.diagnostics]
    assert lines == [1, 2, 3, 4]
    assert "4 errors" in info.value.format()


def test_no_cascade_after_a_broken_definition():
    src = "input A: f32[4]\nB = relu(A\nC = relu(B)\n"
    with pytest.raises(UserError) as info:
        parse(src)
    assert [d.line for d in info.value.diagnostics] == [2]


def test_empty_program():
    for src in ("", "# just a comment\n", "input A: f32[4]\n"):
        with pytest.raises(UserError) as info:
            parse(src)
        assert "empty program" in info.value.diagnostics[0].message


def test_binary_garbage(tmp_path):
    path = tmp_path / "garbage.acir"
    path.write_bytes(b"\x7fELF\x02\x01\x00\x00\x00\x91\xff")
    with pytest.raises(UserError) as info:
        load(path)
    assert "not UTF-8 text" in str(info.value) or "binary" in str(info.value)
    with pytest.raises(UserError) as info:
        parse("input A: f32[4]\x00\x00B = relu(A)")
    assert info.value.diagnostics[0].message.startswith("this looks like binary data")
    assert (info.value.diagnostics[0].line, info.value.diagnostics[0].col) == (1, 16)


def test_missing_file_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="cannot read"):
        load(tmp_path / "nope.acir")
