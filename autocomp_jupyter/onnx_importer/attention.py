"""ONNX's fused transformer ops of opset 23: Attention and RotaryEmbedding, written out as the
comprehensions they are (the importer inherits `AttentionOps`).

- Attention: Q [B, Hq, S, D] (or [B, S, Hq*D] with q_num_heads), K and V [B, Hkv, T, D|Dv];
  query heads grouped over shared KV heads (GQA: query head h reads KV head h // (Hq/Hkv)) by
  viewing Q as [B, Hkv, G, S, D]; past_key/past_value concatenated in front of K/V (and returned
  as present_key/present_value); the scores scaled (1/sqrt(D) unless `scale`), soft-capped
  (`softcap * tanh(x / softcap)`), plus the mask (a bool mask: -inf where False; a float one
  added) and the causal table (key t attends query s iff t <= s + past length), softmax over
  the keys, a row every key of which is masked made 0 (ONNX's rule), then the value product.
  qk_matmul_output is the scores after the cap (modes 0, 1), plus the mask (2) or after the
  softmax (3). Not read: nonpad_kv_seqlen, sliding windows, a mask shorter than the keys (each
  refused by name).
- RotaryEmbedding: x rotated pairwise by the position's angle, (x1, x2) -> (cos x1 - sin x2,
  sin x1 + cos x2), pairs split in halves or interleaved, over the first rotary_embedding_dim
  features (the rest passed through); cos and sin read at position_ids (a one-hot contraction
  at run time, a table folded at import for constant ids).
"""
from __future__ import annotations

import math

import numpy as np


class AttentionOps:
    """Import handlers for Attention and RotaryEmbedding (mixed into the importer)."""

    def _optional(self, node, k: int) -> str | None:
        return node.input[k] if len(node.input) > k and node.input[k] else None

    def _heads_first(self, node, name: str, heads: int, tag: str) -> str:
        """A 3-D [B, S, H*D] input as [B, H, S, D] (a view, then a transpose)."""
        b, s, hd = self.shape(name)
        if hd % heads:
            self.fail(node, f"'{name}' {[b, s, hd]} does not split into {heads} heads")
        self.view(node, f"{name}__{tag}4", name, (b, s, heads, hd // heads))
        out = node.output[0] + f"_{tag}"
        self.lib(node, out, "transpose", [f"{name}__{tag}4"], perm=[0, 2, 1, 3])
        return out

    def op_Attention(self, index, node):
        a = self.attrs(node)
        for k, what in ((6, "nonpad_kv_seqlen"),):
            if self._optional(node, k):
                self.fail(node, f"its {what} input is not supported")
        if a.get("left_window_size", -1) != -1 or a.get("right_window_size", -1) != -1:
            self.fail(node, "sliding-window attention (left/right_window_size) is not supported")
        mode = int(a.get("qk_matmul_output_mode", 0))
        if mode not in (0, 1, 2, 3):
            self.fail(node, f"qk_matmul_output_mode {mode} is not one of ONNX's (0 to 3)")
        q, k, v = node.input[:3]
        rank = len(self.shape(q))
        if rank == 3:
            if "q_num_heads" not in a or "kv_num_heads" not in a:
                self.fail(node, "3-D inputs need the q_num_heads and kv_num_heads attributes")
            q = self._heads_first(node, q, int(a["q_num_heads"]), "q")
            k = self._heads_first(node, k, int(a["kv_num_heads"]), "k")
            v = self._heads_first(node, v, int(a["kv_num_heads"]), "v")
        elif rank != 4 or len(self.shape(k)) != 4 or len(self.shape(v)) != 4:
            self.fail(node, "Q, K and V must all be 4-D [B, H, S, D] or 3-D [B, S, H*D]")
        past = 0
        past_k, past_v = self._optional(node, 4), self._optional(node, 5)
        if (past_k is None) != (past_v is None):
            self.fail(node, "past_key and past_value come together")
        if past_k is not None:
            past = self.shape(past_k)[2]
            self.lib(node, node.output[0] + "_keys", "concat", [past_k, k], axis=2)
            self.lib(node, node.output[0] + "_values", "concat", [past_v, v], axis=2)
            k, v = node.output[0] + "_keys", node.output[0] + "_values"
        for i, src in ((1, k), (2, v)):   # present_key, present_value: the whole cache
            if len(node.output) > i and node.output[i]:
                self.alias(node, node.output[i], src)
        (b, hq, s, d), (bk, hkv, t, dk), (bv, hv, tv, dv) = self.shape(q), self.shape(k), self.shape(v)
        if not (b == bk == bv and d == dk and hkv == hv and t == tv and hkv and hq % hkv == 0):
            self.fail(node, f"Q {[b, hq, s, d]}, K {[bk, hkv, t, dk]} and V {[bv, hv, tv, dv]} do not fit "
                            "(one batch, one head size, the query heads a multiple of the KV heads)")
        g = hq // hkv
        out = node.output[0]
        self.view(node, q + "__groups", q, (b, hkv, g, s, d))
        scale = float(a["scale"]) if "scale" in a else 1 / math.sqrt(d)
        scores = self.comp(out + "_scores", (b, hkv, g, s, t), "f32", ["b0", "i0", "i1", "i2", "i3"], "+=",
                           f"{self.operand(q + '__groups')}[b0, i0, i1, i2, k0] * {self.operand(k)}[b0, i0, i3, k0]"
                           f" * {scale!r}", "Attention: scaled scores, KV heads shared by groups of query heads")
        scores_name = out + "_scores"
        softcap = float(a.get("softcap", 0.0))
        if softcap > 0:
            names = ["b0", "i0", "i1", "i2", "i3"]
            at = f"{scores}[{', '.join(names)}]"
            self.comp(out + "_capped", (b, hkv, g, s, t), "f32", names, "=",
                      f"{softcap!r} * tanh({at} / {softcap!r})", "Attention: soft cap")
            scores_name = out + "_capped"
        bias = self._attention_bias(node, (b, hq, hkv, g, s, t), past, bool(self.flag(node, "is_causal", 0)))
        logits = scores_name
        if bias is not None:
            self.ew(node, out + "_logits", [scores_name, bias], "{0} + {1}", dtype="f32", note="Attention: + mask")
            logits = out + "_logits"
        self.lib(node, out + "_probs", "softmax", [logits], axis=-1)
        probs = out + "_probs"
        if bias is not None and self._optional(node, 3):
            # ONNX: a query row whose every key is masked attends nothing (0), not NaN
            bshape = self.shape(bias)
            names = [f"i{n}" for n in range(len(bshape))]
            keep = names[:-1] + ["u0"]
            red = names[:-1] + ["k0"]
            self.comp(out + "_rowmax", tuple(bshape[:-1]) + (1,), "f32", keep, "max=",
                      f"{self.operand(bias)}[{', '.join(red)}]")
            self.consts[out + "_ninf"] = np.array([-np.inf], np.float32)
            self.ew(node, out + "_guarded", [probs, out + "_rowmax", out + "_ninf"], "select(equal({1}, {2}), 0, {0})",
                    dtype="f32", note="Attention: fully masked rows are 0")
            probs = out + "_guarded"
        if len(node.output) > 3 and node.output[3]:   # the scores at the stage `mode` names, as [B, Hq, S, T]
            stage = {0: scores_name, 1: scores_name, 2: logits, 3: probs}[mode]
            self.view(node, node.output[3], stage, (b, hq, s, t))
        self.comp(out + "_heads", (b, hkv, g, s, dv), self.dtype(node.input[0]), ["b0", "i0", "i1", "i2", "i3"],
                       "+=", f"{self.operand(probs)}[b0, i0, i1, i2, k0] * {self.operand(v)}[b0, i0, k0, i3]",
                       "Attention: the value product")
        if rank == 4:
            return self.view(node, out, out + "_heads", (b, hq, s, dv))
        self.view(node, out + "_heads4", out + "_heads", (b, hq, s, dv))
        self.lib(node, out + "_seq", "transpose", [out + "_heads4"], perm=[0, 2, 1, 3])
        self.view(node, out, out + "_seq", (b, s, hq * dv))

    def _attention_bias(self, node, dims, past: int, causal: bool) -> str | None:
        """The additive bias over [B, Hkv, G, S, T] (broadcast where it does not vary): the
        mask (bool: 0 where True, -inf where False; float: as given) plus the causal table."""
        b, hq, hkv, g, s, t = dims
        out = node.output[0]
        terms, inputs = [], []
        mask = self._optional(node, 3)
        if mask is not None:
            mshape = (1,) * (4 - len(self.shape(mask))) + tuple(self.shape(mask))
            if len(mshape) != 4 or mshape[-1] != t or mshape[-2] not in (1, s) or mshape[1] not in (1, hq) \
                    or mshape[0] not in (1, b):
                self.fail(node, f"attn_mask {list(self.shape(mask))} does not broadcast to [B, Hq, S, T] = "
                                f"{[b, hq, s, t]}", "a mask shorter than the keys is not supported")
            heads = (hkv, g) if mshape[1] == hq else (1, 1)
            self.view(node, mask + "__5d", mask, (mshape[0],) + heads + mshape[2:])
            inputs.append(mask + "__5d")
            if self.dtype(mask) == "i8":   # bool: attend where True
                self.consts[out + "_mask_ninf"] = np.array([-np.inf], np.float32)
                inputs.append(out + "_mask_ninf")
                terms.append("select({0}, 0, {1})")
            else:
                terms.append("{0}")
        if causal:
            si, ti = np.arange(s)[:, None], np.arange(t)[None, :]
            self.consts[out + "_causal"] = np.where(ti <= si + past, 0.0, -np.inf).astype(np.float32)
            self.view(node, out + "_causal5", out + "_causal", (1, 1, 1, s, t))
            terms.append("{%d}" % len(inputs))
            inputs.append(out + "_causal5")
        if not terms:
            return None
        if len(inputs) == 1 and terms == ["{0}"]:
            return inputs[0]
        self.ew(node, out + "_bias", inputs, " + ".join(terms), dtype="f32", note="Attention: mask + causal")
        return out + "_bias"

    # ------------------------------------------------------------ rotary embedding

    def _rotary_table(self, node, k: int, half: int, b: int, s: int) -> str:
        """cos (k = 1) or sin (k = 2) at each [batch, position]: [B, S, half]."""
        cache = node.input[k]
        pos = self._optional(node, 3)
        out = f"{node.output[0]}_{'cos' if k == 1 else 'sin'}"
        if pos is None:
            if tuple(self.shape(cache)) != (b, s, half):
                self.fail(node, f"without position_ids, '{cache}' must be [B, S, rotary_dim/2] = {[b, s, half]}")
            return cache
        rows, width = self.shape(cache) if len(self.shape(cache)) == 2 else (0, 0)
        if width != half or tuple(self.shape(pos)) != (b, s):
            self.fail(node, f"'{cache}' {list(self.shape(cache))} and position_ids {list(self.shape(pos))} do not fit "
                            f"(expected [max_position, {half}] and [{b}, {s}])")
        if cache in self.consts and pos in self.consts:
            ids = self.consts[pos].astype(np.int64)
            if ((ids < 0) | (ids >= rows)).any():
                self.fail(node, f"a position id is outside 0 .. {rows - 1}")
            self.consts[out] = self.consts[cache][ids].astype(np.float32)
            return out
        iota = self._iota(out + "_iota", rows)
        self.comp(out, (b, s, half), "f32", ["b0", "i0", "i1"], "+=",
                  f"equal({self.operand(pos)}[b0, i0], {iota}[k0]) * {self.operand(cache)}[k0, i1]",
                  "RotaryEmbedding: the cache at the position ids (one-hot)")
        return out

    def op_RotaryEmbedding(self, index, node):
        a = self.attrs(node)
        x = node.input[0]
        shape = tuple(self.shape(x))
        out = node.output[0]
        if len(shape) == 3:
            heads = int(a.get("num_heads", 0))
            if heads <= 0 or shape[2] % heads:
                self.fail(node, f"a 3-D input {list(shape)} needs num_heads dividing {shape[2]}")
            self.view(node, x + "__heads", x, shape[:2] + (heads, shape[2] // heads))
            x4, s_axis = x + "__heads", 1        # [B, S, H, D]
        elif len(shape) == 4:
            x4, s_axis = x, 2                    # [B, H, S, D]
        else:
            self.fail(node, f"the input must be 3-D or 4-D, got {list(shape)}")
        dims = tuple(self.shape(x4))
        d = dims[3]
        rd = int(a.get("rotary_embedding_dim", 0)) or d
        if rd > d or rd % 2:
            self.fail(node, f"rotary_embedding_dim {rd} must be even and at most the head size {d}")
        half = rd // 2
        cos = self.operand(self._rotary_table(node, 1, half, dims[0], dims[s_axis]))
        sin = self.operand(self._rotary_table(node, 2, half, dims[0], dims[s_axis]))
        xs = self.operand(x4)
        n = ["i0", "i1", "i2"]
        lead = ", ".join(n)
        trig = f"[{n[0]}, {n[s_axis]}, j0]"
        interleaved = self.flag(node, "interleaved", 0)
        if interleaved:   # pairs (2j, 2j + 1)
            x1, x2, lhs, pair = f"{xs}[{lead}, 2*j0]", f"{xs}[{lead}, 2*j0 + 1]", n + ["j0", "j1"], dims[:3] + (half, 2)
            where = ""
        else:             # pairs (j, j + rd/2)
            x1, x2, lhs, pair = f"{xs}[{lead}, j0]", f"{xs}[{lead}, j0 + {half}]", n + ["j1", "j0"], dims[:3] + (2, half)
            where = f" where j0 < {half}" if half != d else ""
        first = self._iota(out + "_pair", 2)
        self.comp(out + "_rotated", pair, self.dtype(x), lhs, "=",
                  f"select(equal({first}[j1], 0), {cos}{trig} * {x1} - {sin}{trig} * {x2}, "
                  f"{sin}{trig} * {x1} + {cos}{trig} * {x2}){where}", "RotaryEmbedding")
        self.view(node, out + "_rot", out + "_rotated", dims[:3] + (rd,))
        full = out + "_rot"
        if rd < d:   # the features past rotary_embedding_dim pass through
            self._sliced(node, out + "_pass", x4, [0, 0, 0, rd], [1, 1, 1, 1], list(dims[:3]) + [d - rd],
                         "RotaryEmbedding: not rotated")
            self.lib(node, out + "_all", "concat", [out + "_rot", out + "_pass"], axis=3)
            full = out + "_all"
        self.view(node, out, full, shape)
