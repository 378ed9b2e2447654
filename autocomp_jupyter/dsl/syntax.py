"""Lexer and parser: DSL text → a surface syntax tree (one node per source line).

The parser recovers at line ends: a syntax error is recorded and parsing resumes with
the next statement, so one run reports every error of the program.

Grammar (one statement per line):

    decl   := ('input' | 'param' | 'tensor') NAME ':' NAME '[' INT (',' INT)* ']'
    output := 'output' NAME (',' NAME)*
    call   := NAME '=' NAME '(' [arg (',' arg)*] ')'          arg := NAME | NAME '=' value
    comp   := NAME '[' NAME (',' NAME)* ']' ('=' | '+=' | 'max=') expr
              ['where' cond ((',' | 'and') cond)*]
    cond   := NAME '<' INT                       (a bound: the index runs over 0 .. INT-1)
            | expr ('<' | '<=' | '>' | '>=' | '==') expr    (an affine relation cutting the domain)
    expr   := term (('+' | '-') term)*        term := unary (('*' | '/') unary)*
    unary  := '-' unary | NUMBER | NAME '[' expr, ... ']' | NAME '(' expr, ... ')' | '(' expr ')'

Size limits (`limits.py`) are syntax errors at the offending token: expression nesting depth
(the parser and every tree walker recurse per level), expression size, statement count, and
numbers too long to be a dimension. A long chain `a + b + ... ` is not a deep tree: beyond
`_LEFT_FOLD` operands it is folded as a balanced tree (same value up to rounding order).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from ..errors import Diagnostic
from ..limits import ATTRIBUTE, EXPR_DEPTH, EXPR_NODES, EXTENT, STATEMENTS


@dataclass(frozen=True)
class Token:
    kind: str  # NAME NUMBER OP NEWLINE EOF
    text: str
    line: int
    col: int

    @property
    def length(self) -> int:
        return max(1, len(self.text))


_TOKEN_RE = re.compile(
    r"(?P<SPACE>[ \t\r\f]+)|(?P<COMMENT>#[^\n]*)|(?P<NEWLINE>\n)"
    r"|(?P<NUMBER>(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?)"
    r"|(?P<NAME>[A-Za-z_][A-Za-z_0-9]*)"
    r"|(?P<OP>\+=|<=|>=|==|[-+*/=\[\](),:<>])"
)


def tokenize(source: str, errors: list[Diagnostic]) -> list[Token]:
    """Tokens of `source`; unknown characters become diagnostics and are skipped."""
    tokens: list[Token] = []
    line, line_start, pos = 1, 0, 0
    binary = next((i for i, ch in enumerate(source) if ch == "\x00" or ch == "\ufffd"), None)
    if binary is not None:  # a binary file: one clear error instead of one per byte
        line = source.count("\n", 0, binary) + 1
        col = binary - (source.rfind("\n", 0, binary) + 1) + 1
        errors.append(Diagnostic("this looks like binary data, not program text", line, col, 1,
                                 "autocomp programs are plain UTF-8 text (.acir); is this the right file?"))
        return [Token("EOF", "", 1, 1)]
    while pos < len(source):
        m = _TOKEN_RE.match(source, pos)
        col = pos - line_start + 1
        if not m:
            ch = source[pos]
            if not ch.isprintable() and ch not in "\t":
                msg = f"binary or control character {ch!r} in the program text"
                hint = "autocomp programs are plain text; is this the right file?"
            else:
                msg, hint = f"unexpected character {ch!r}", "expected a name, number, bracket or operator"
            if not errors or errors[-1].line != line:  # one such error per line is enough
                errors.append(Diagnostic(msg, line, col, 1, hint))
            pos += 1
            continue
        kind, text = m.lastgroup, m.group()
        if kind == "NEWLINE":
            tokens.append(Token("NEWLINE", "\n", line, col))
            line, line_start = line + 1, m.end()
        elif kind == "NAME" and text == "max" and source.startswith("=", m.end()) \
                and not source.startswith("==", m.end()):
            tokens.append(Token("OP", "max=", line, col))
            pos = m.end() + 1
            continue
        elif kind in ("NUMBER", "NAME", "OP"):
            tokens.append(Token(kind, text, line, col))
        pos = m.end()
    tokens.append(Token("NEWLINE", "\n", line, pos - line_start + 1))
    tokens.append(Token("EOF", "", line, pos - line_start + 1))
    return tokens


# --------------------------------------------------------------------------- syntax tree


@dataclass(frozen=True)
class Where:
    """A position in the source: the token a node starts at."""

    line: int
    col: int
    length: int = 1


@dataclass(frozen=True)
class Num:
    value: float
    at: Where


@dataclass(frozen=True)
class Ref:
    """A bare name: an index inside brackets, or a tensor in a library call."""

    name: str
    at: Where


@dataclass(frozen=True)
class Index:
    """`tensor[e, ...]` in an expression."""

    tensor: str
    indices: tuple
    at: Where


@dataclass(frozen=True)
class Apply:
    fn: str
    args: tuple
    at: Where


@dataclass(frozen=True)
class Binary:
    op: str
    lhs: object
    rhs: object
    at: Where


@dataclass(frozen=True)
class Negate:
    operand: object
    at: Where


@dataclass(frozen=True)
class Decl:
    role: str
    name: str
    dtype: str
    shape: tuple  # of (int value, Where)
    at: Where
    name_at: Where
    dtype_at: Where


@dataclass(frozen=True)
class Outputs:
    names: tuple  # of Ref
    at: Where


@dataclass(frozen=True)
class LibCall:
    target: str
    op: str
    args: tuple  # Ref | Num | ... positional
    kwargs: tuple  # of (name, value, Where)
    at: Where
    op_at: Where


@dataclass(frozen=True)
class Comprehension:
    target: str
    indices: tuple  # of Ref
    reduce: str | None
    expr: object
    bounds: tuple  # of (Ref, int, Where): 'where r < 3'
    at: Where
    relations: tuple = ()  # of Relation: 'where t <= s' 
    text: str = field(default="", compare=False)


@dataclass(frozen=True)
class Relation:
    """`lhs op rhs` in a `where` clause, op one of < <= > >= ==."""

    lhs: object
    op: str
    rhs: object
    at: Where


RELATIONS = ("<", "<=", ">", ">=", "==")


class _Syntax(Exception):
    def __init__(self, token: Token, message: str, hint: str = ""):
        self.diagnostic = Diagnostic(message, token.line, token.col, token.length, hint)


def _describe(tok: Token) -> str:
    if tok.kind == "NEWLINE":
        return "end of line"
    if tok.kind == "EOF":
        return "end of input"
    return f"'{tok.text}'"


# Chains of at most this many operands fold left to right, as written; longer ones fold as
# a balanced tree so a 1,500-term sum is 11 levels deep instead of 1,500.
_LEFT_FOLD = 16
# Integer literals longer than this are out of every range (and Python refuses to convert
# very long digit strings): they are reported without conversion.
_MAX_INT_DIGITS = 19


def _fold(first, rest: list, inverse: dict, make):
    """`first op1 x1 op2 x2 ...` as a tree with the same value: left to right when short,
    balanced when long. `rest` holds (op token, operand); `inverse` maps the inverting
    operator to its partner ({'-': '+'} or {'/': '*'}): a - (b - c + d) == a - b + c - d, so
    the right half of a split under an inverting operator flips its operators."""
    if len(rest) < _LEFT_FOLD:
        node = first
        for op, operand in rest:
            node = make(op, node, operand)
        return node
    mid = len(rest) // 2
    left = _fold(first, rest[:mid], inverse, make)
    op, head = rest[mid]
    if op.text in inverse:  # '-' or '/': flip the right half
        flip = {**inverse, **{v: k for k, v in inverse.items()}}
        tail = [(Token(o.kind, flip[o.text], o.line, o.col), x) for o, x in rest[mid + 1:]]
    else:
        tail = rest[mid + 1:]
    return make(op, left, _fold(head, tail, inverse, make))


def _tree_size(node) -> tuple[int, int]:
    """(depth, node count) of an expression tree, without recursion."""
    depth = count = 0
    stack = [(node, 1)]
    while stack:
        node, d = stack.pop()
        count += 1
        depth = max(depth, d)
        if isinstance(node, Binary):
            stack += [(node.lhs, d + 1), (node.rhs, d + 1)]
        elif isinstance(node, Negate):
            stack.append((node.operand, d + 1))
        elif isinstance(node, (Apply, Index)):
            stack += [(x, d + 1) for x in (node.args if isinstance(node, Apply) else node.indices)]
    return depth, count


class Parser:
    def __init__(self, tokens: list[Token], errors: list[Diagnostic]):
        self.tokens, self.pos, self.errors = tokens, 0, errors
        self.depth, self.max_depth = 0, EXPR_DEPTH.value()
        # Names a statement with a syntax error meant to define (quiets later 'unknown' errors).
        self.broken_names: set[str] = set()

    # token helpers
    @property
    def tok(self) -> Token:
        return self.tokens[self.pos]

    def peek(self, offset: int = 1) -> Token:
        return self.tokens[min(self.pos + offset, len(self.tokens) - 1)]

    def next(self) -> Token:
        tok = self.tokens[self.pos]
        self.pos = min(self.pos + 1, len(self.tokens) - 1)
        return tok

    def accept(self, text: str) -> Token | None:
        if self.tok.kind in ("OP", "NAME") and self.tok.text == text:
            return self.next()
        return None

    def expect(self, text: str, what: str = "") -> Token:
        if self.tok.text == text and self.tok.kind in ("OP", "NAME"):
            return self.next()
        raise _Syntax(self.tok, f"expected '{text}'{what}, found {_describe(self.tok)}")

    def expect_name(self, what: str) -> Token:
        if self.tok.kind == "NAME":
            return self.next()
        raise _Syntax(self.tok, f"expected {what}, found {_describe(self.tok)}")

    def expect_int(self, what: str) -> tuple[int, Where]:
        tok = start = self.tok
        negative = False
        if tok.text == "-":
            negative = True
            self.next()
            tok = self.tok
        if tok.kind == "NUMBER" and re.fullmatch(r"\d+", tok.text):
            if len(tok.text.lstrip("0")) > _MAX_INT_DIGITS:
                raise _Syntax(tok, f"{what} has {len(tok.text.lstrip('0'))} digits, over the "
                              f"{EXTENT.name} limit of {EXTENT.value():,}", EXTENT.hint())
            self.next()
            length = tok.col + tok.length - start.col if start.line == tok.line else tok.length
            return (-int(tok.text) if negative else int(tok.text)), Where(start.line, start.col, length)
        raise _Syntax(tok, f"expected {what} (an integer), found {_describe(tok)}")

    @staticmethod
    def where(tok: Token) -> Where:
        return Where(tok.line, tok.col, tok.length)

    # statements
    def parse(self) -> list:
        nodes = []
        max_statements = STATEMENTS.value()
        while self.tok.kind != "EOF":
            if self.tok.kind == "NEWLINE":
                self.next()
                continue
            start = self.pos
            if len(nodes) >= max_statements:
                tok = self.tok
                self.errors.append(Diagnostic(
                    f"more than {max_statements:,} statements, over the {STATEMENTS.name} limit",
                    tok.line, tok.col, tok.length, STATEMENTS.hint()))
                break
            self.depth = 0
            try:
                nodes.append(self.statement())
                if self.tok.kind not in ("NEWLINE", "EOF"):
                    raise _Syntax(self.tok, f"unexpected {_describe(self.tok)} after the statement",
                                  "one statement per line")
            except _Syntax as err:
                self.errors.append(err.diagnostic)
                first, second = self.tokens[start], self.tokens[min(start + 1, len(self.tokens) - 1)]
                if first.text in ("input", "param", "tensor") and second.kind == "NAME":
                    self.broken_names.add(second.text)
                elif first.kind == "NAME" and second.text in ("=", "["):
                    self.broken_names.add(first.text)
            while self.tok.kind not in ("NEWLINE", "EOF"):
                self.next()
        return nodes

    def statement(self):
        tok = self.tok
        if tok.kind != "NAME":
            raise _Syntax(tok, f"expected a declaration or a statement, found {_describe(tok)}",
                          "statements look like 'Y = relu(X)' or 'C[i, j] += A[i, k] * B[k, j]'")
        if tok.text in ("input", "param", "tensor") and self.peek().kind == "NAME":
            return self.declaration()
        if tok.text == "output" and self.peek().kind == "NAME":
            return self.outputs()
        nxt = self.peek()
        if nxt.text == "[":
            return self.comprehension()
        if nxt.text == "=":
            return self.library_call()
        if nxt.kind == "NAME" and tok.text in ("inputs", "params", "tensors", "outputs", "let", "var"):
            raise _Syntax(tok, f"unknown declaration keyword '{tok.text}'",
                          f"did you mean '{tok.text.rstrip('s') if tok.text.endswith('s') else 'tensor'}'?")
        raise _Syntax(nxt, f"expected '=' or '[' after '{tok.text}', found {_describe(nxt)}",
                      "statements look like 'Y = relu(X)' or 'C[i, j] += A[i, k] * B[k, j]'")

    def declaration(self) -> Decl:
        kw = self.next()
        name = self.expect_name("a tensor name")
        self.expect(":", f" after '{name.text}'")
        dtype = self.expect_name("a dtype (f32, f16, bf16, i8, i32)")
        self.expect("[", " to open the shape")
        dims = [self.expect_int("a dimension")]
        while self.accept(","):
            dims.append(self.expect_int("a dimension"))
        self.expect("]", " to close the shape")
        return Decl(kw.text, name.text, dtype.text, tuple(dims), self.where(kw), self.where(name),
                    self.where(dtype))

    def outputs(self) -> Outputs:
        kw = self.next()
        names = [self.expect_name("a tensor name")]
        while self.accept(","):
            names.append(self.expect_name("a tensor name"))
        return Outputs(tuple(Ref(n.text, self.where(n)) for n in names), self.where(kw))

    def library_call(self) -> LibCall:
        target = self.next()
        self.expect("=")
        op = self.tok
        if op.kind != "NAME" or self.peek().text != "(":
            raise _Syntax(op, f"expected a library op call like 'relu({target.text})', found {_describe(op)}",
                          "use 'T[i, j] = ...' with indices for a tensor comprehension")
        self.next()
        self.expect("(")
        args, kwargs = [], []
        if not self.accept(")"):
            while True:
                if self.tok.kind == "NAME" and self.peek().text == "=":
                    key = self.next()
                    self.next()
                    kwargs.append((key.text, self.attribute_value(), self.where(key)))
                else:
                    if kwargs:
                        raise _Syntax(self.tok, "positional argument after a keyword argument")
                    args.append(self.expression())
                if self.accept(")"):
                    break
                self.expect(",", " or ')' in the argument list")
        return LibCall(target.text, op.text, tuple(args), tuple(kwargs), self.where(target), self.where(op))

    def attribute_value(self):
        if self.accept("["):
            items = []
            if not self.accept("]"):
                items.append(self.expect_int("a list element")[0])
                while self.accept(","):
                    items.append(self.expect_int("a list element")[0])
                self.expect("]", " to close the list")
            return tuple(items)
        tok = self.tok
        negative = bool(self.accept("-"))
        tok2 = self.tok
        if tok2.kind == "NUMBER":
            is_float = bool(re.search(r"[.eE]", tok2.text))
            if not is_float and len(tok2.text.lstrip("0")) > _MAX_INT_DIGITS:
                raise _Syntax(tok2, f"attribute value has {len(tok2.text.lstrip('0'))} digits, over the "
                              f"{ATTRIBUTE.name} limit of {ATTRIBUTE.value():,}", ATTRIBUTE.hint())
            if is_float and not math.isfinite(float(tok2.text)):
                raise _Syntax(tok2, f"number {tok2.text} is out of the floating-point range")
            self.next()
            value = float(tok2.text) if is_float else int(tok2.text)
            return -value if negative else value
        if tok2.kind == "NAME" and not negative:
            self.next()
            return tok2.text
        raise _Syntax(tok, f"expected a number or a list like [0, 2, 1], found {_describe(tok)}")

    def comprehension(self) -> Comprehension:
        target = self.next()
        self.expect("[")
        indices = [self.expect_name("an index name")]
        while self.accept(","):
            indices.append(self.expect_name("an index name"))
        self.expect("]", " after the left-hand indices")
        op = self.tok
        if op.text not in ("=", "+=", "max="):
            raise _Syntax(op, f"expected '=', '+=' or 'max=', found {_describe(op)}")
        self.next()
        expr = self.expression()
        depth, size = _tree_size(expr)
        if depth > self.max_depth:
            raise _Syntax(target, f"the expression is {depth} levels deep, over the {EXPR_DEPTH.name} "
                          f"limit of {self.max_depth}", "split it into several statements, or "
                          + EXPR_DEPTH.hint())
        if size > EXPR_NODES.value():
            raise _Syntax(target, f"the expression has {size:,} terms, over the {EXPR_NODES.name} limit of "
                          f"{EXPR_NODES.value():,}", "split it into several statements, or " + EXPR_NODES.hint())
        bounds, relations = [], []
        if self.accept("where"):
            while True:
                self.condition(bounds, relations)
                if not (self.accept(",") or self.accept("and")):
                    break
        return Comprehension(target.text, tuple(Ref(i.text, self.where(i)) for i in indices),
                             {"=": None, "+=": "+", "max=": "max"}[op.text], expr, tuple(bounds),
                             self.where(target), relations=tuple(relations))

    def condition(self, bounds: list, relations: list) -> None:
        """One `where` condition: `r < 3` bounds an index; any other comparison of two
        expressions is a relation between indices."""
        start = self.tok
        if start.kind == "NAME" and self.peek().text == "<" and self.peek(2).kind == "NUMBER" \
                and self.peek(3).text in (",", "and", "\n", ""):
            self.next()
            self.next()
            bound = self.expect_int("a bound")
            bounds.append((Ref(start.text, self.where(start)), bound[0], bound[1]))
            return
        lhs = self.expression()
        op = self.tok
        if op.kind != "OP" or op.text not in RELATIONS:
            raise _Syntax(op, f"expected a comparison (<, <=, >, >=, ==) in the 'where' clause, found "
                          f"{_describe(op)}", "conditions read 'where r < 3' or 'where t <= s'")
        self.next()
        rhs = self.expression()
        length = max(1, op.col - start.col + op.length) if op.line == start.line else start.length
        relations.append(Relation(lhs, op.text, rhs, Where(start.line, start.col, length)))

    # expressions
    def expression(self):
        first, rest = self.term(), []
        while self.tok.text in ("+", "-") and self.tok.kind == "OP":
            op = self.next()
            rest.append((op, self.term()))
        return _fold(first, rest, {"-": "+"}, self._binary)

    def term(self):
        first, rest = self.unary(), []
        while self.tok.text in ("*", "/") and self.tok.kind == "OP":
            op = self.next()
            rest.append((op, self.unary()))
        return _fold(first, rest, {"/": "*"}, self._binary)

    def _binary(self, op: Token, lhs, rhs):
        return Binary(op.text, lhs, rhs, self.where(op))

    def unary(self):
        # Each level of parentheses, signs, calls and brackets is one more level of recursion
        # here and in every walker of the tree: bounded by the nesting-depth limit.
        self.depth += 1
        try:
            if self.depth > self.max_depth:
                raise _Syntax(self.tok, f"expression nested deeper than the {EXPR_DEPTH.name} limit of "
                              f"{self.max_depth} (parentheses, signs, calls and brackets)",
                              "split it into several statements, or " + EXPR_DEPTH.hint())
            return self._unary()
        finally:
            self.depth -= 1

    def _unary(self):
        tok = self.tok
        if self.accept("-"):
            return Negate(self.unary(), self.where(tok))
        if self.accept("+"):
            return self.unary()
        if tok.kind == "NUMBER":
            if not math.isfinite(float(tok.text)):
                raise _Syntax(tok, f"number {tok.text[:30]}{'...' if len(tok.text) > 30 else ''} is out of "
                              "the floating-point range")
            self.next()
            return Num(float(tok.text), self.where(tok))
        if self.accept("("):
            node = self.expression()
            self.expect(")", " to close '('")
            return node
        if tok.kind == "NAME":
            self.next()
            if self.accept("["):
                items = [self.expression()]
                while self.accept(","):
                    items.append(self.expression())
                self.expect("]", f" to close '{tok.text}['")
                return Index(tok.text, tuple(items), self.where(tok))
            if self.accept("("):
                items = []
                if not self.accept(")"):
                    items.append(self.expression())
                    while self.accept(","):
                        items.append(self.expression())
                    self.expect(")", f" to close '{tok.text}('")
                return Apply(tok.text, tuple(items), self.where(tok))
            return Ref(tok.text, self.where(tok))
        raise _Syntax(tok, f"expected an expression, found {_describe(tok)}")


def parse_syntax(source: str, errors: list[Diagnostic]) -> tuple[list, set[str]]:
    """Surface syntax nodes of `source` and the names of statements that failed to parse;
    problems are appended to `errors`."""
    parser = Parser(tokenize(source, errors), errors)
    return parser.parse(), parser.broken_names
