"""ONNX's resampling and quantisation: Resize and Upsample as one contraction per resized axis
with a constant [out, in] matrix (onnx's own reference run on a basis), QuantizeLinear and
DequantizeLinear (per tensor or per axis).
"""
from __future__ import annotations

import numpy as np


class ResampleOps:
    """Import handlers for resampling and QDQ quantisation (mixed into the importer)."""

    def _resample(self, node, attrs: dict, scales, sizes):
        """Resize/Upsample as one contraction per resized axis with a constant [out, in]
        matrix: onnx's own reference run on a basis gives each matrix (nearest: one-hot rows;
        linear and cubic: the interpolation weights), so every mode and coordinate transform
        means what onnx says it means."""
        from onnx import helper

        x = node.input[0]
        shape = list(self.shape(x))
        rank = len(shape)
        mode = attrs.get("mode", "nearest")
        if attrs.get("coordinate_transformation_mode") == "tf_crop_and_resize":
            self.fail(node, "coordinate_transformation_mode=tf_crop_and_resize is not supported")
        if attrs.get("keep_aspect_ratio_policy", "stretch") != "stretch":
            self.fail(node, "keep_aspect_ratio_policy other than 'stretch' is not supported")
        axes = [int(v) % rank for v in attrs.get("axes", range(rank))]
        if scales is not None:
            scales = [float(v) for v in scales]
            if len(scales) != len(axes):
                self.fail(node, f"{len(scales)} scales for {len(axes)} axes")
            per = {ax: ("scale", s) for ax, s in zip(axes, scales)}
        else:
            sizes = [int(v) for v in sizes]
            if len(sizes) != len(axes):
                self.fail(node, f"{len(sizes)} sizes for {len(axes)} axes")
            per = {ax: ("size", s) for ax, s in zip(axes, sizes)}
        keep = {k: v for k, v in attrs.items() if k in ("mode", "coordinate_transformation_mode", "nearest_mode",
                                                         "cubic_coeff_a", "exclude_outside", "antialias")}
        cur = x
        out = node.output[0]
        moved = [ax for ax in sorted(per) if not (per[ax] == ("scale", 1.0) or per[ax] == ("size", shape[ax]))]
        if not moved:
            return self.alias(node, out, x)
        for step, ax in enumerate(moved):
            kind, value = per[ax]
            n = shape[ax]
            basis = np.eye(n, dtype=np.float32)
            inputs = ["X", "", "scales"] if kind == "scale" else ["X", "", "", "sizes"]
            feeds = {"X": basis}
            if kind == "scale":
                feeds["scales"] = np.array([1.0, value], np.float32)
            else:
                feeds["sizes"] = np.array([n, value], np.int64)
            probe = helper.make_node("Resize", inputs, ["Y"], **keep)
            try:   # Resize of opset 19 and later: every attribute the older versions have
                matrix = np.asarray(self.evaluate(probe, feeds, opset=max(19, self.opset))[0]).T   # [out, in]
            except Exception as err:
                self.fail(node, f"cannot resample with {keep} ({type(err).__name__}: {err})")
            if matrix.shape[1] != n or matrix.shape[0] <= 0:
                self.fail(node, f"resampling axis {ax} gives {matrix.shape[0]} points")
            m_name = f"{out}_interp{ax}"
            self.consts[m_name] = matrix.astype(np.float32)
            names = [f"i{d}" for d in range(rank)]
            src = [("k0" if d == ax else names[d]) for d in range(rank)]
            new_shape = [matrix.shape[0] if d == ax else e for d, e in enumerate(shape)]
            target = out if step == len(moved) - 1 else f"{out}_axis{ax}"
            self.comp(target, new_shape, self.dtype(x), names, "+=",
                      f"{self.operand(m_name)}[i{ax}, k0] * {self.operand(cur)}[{', '.join(src)}]",
                      f"{node.op_type} {mode}, axis {ax}")
            cur, shape = target, new_shape

    def op_Resize(self, index, node):
        a = self.attrs(node)
        v = self.version(node)
        if v < 11:
            scales = self.const(node, 1, "scales").reshape(-1)
            a.setdefault("coordinate_transformation_mode", "asymmetric")
            a.setdefault("nearest_mode", "floor")
            return self._resample(node, a, scales, None)
        scales = self.const(node, 2, "scales").reshape(-1) if len(node.input) > 2 and node.input[2] else None
        if scales is not None and scales.size == 0:
            scales = None
        sizes = self.const(node, 3, "sizes").reshape(-1) if scales is None else None
        self._resample(node, a, scales, sizes)

    def op_Upsample(self, index, node):
        a = self.attrs(node)
        scales = a["scales"] if "scales" in a else self.const(node, 1, "scales").reshape(-1)
        a = {"mode": a.get("mode", "nearest"), "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}
        self._resample(node, a, scales, None)

    _QRANGE = {3: (-128, 127, "i8"), 2: (0, 255, "i32"), 5: (-32768, 32767, "i32"), 4: (0, 65535, "i32"),
               6: (-2 ** 31, 2 ** 31 - 1, "i32")}

    def _per_axis(self, node, name: str, k: int, x_rank: int, axis: int) -> str:
        value = self.const(node, k, name)
        if value.size == 1:
            return node.input[k]
        aligned = f"{node.input[k]}__axis{axis}"
        self.consts[aligned] = value.reshape((-1,) + (1,) * (x_rank - axis - 1))
        return aligned

    def op_QuantizeLinear(self, index, node):
        a = self.attrs(node)
        x = node.input[0]
        rank = len(self.shape(x))
        axis = a.get("axis", 1) % max(rank, 1)
        if a.get("block_size", 0):
            self.fail(node, "blocked quantisation (block_size) is not supported")
        has_zp = len(node.input) > 2 and node.input[2]
        code = self.onnx.helper.np_dtype_to_tensor_dtype(self.consts[node.input[2]].dtype) if has_zp \
            and node.input[2] in self.consts else a.get("output_dtype", 2) or 2
        if code not in self._QRANGE:
            self.fail(node, f"quantising to {self.onnx.TensorProto.DataType.Name(code)} is not supported",
                      "supported: int8, uint8, int16, uint16, int32")
        lo, hi, dtype = self._QRANGE[code]
        scale = self._per_axis(node, "scale", 1, rank, axis)
        inputs, expr = [x, scale], "{0} / {1}"
        if has_zp:
            inputs.append(self._per_axis(node, "zero point", 2, rank, axis))
            expr += " + {2}"
        if dtype != "i8":   # the i8 store saturates by itself; a wider one clamps to the type's range
            expr = f"min(max({expr}, {lo}), {hi})"
        # stored rounded half to even, as ONNX's QuantizeLinear
        self.ew(node, node.output[0], inputs, expr, dtype=dtype, note="QuantizeLinear")

    def op_DequantizeLinear(self, index, node):
        a = self.attrs(node)
        x = node.input[0]
        rank = len(self.shape(x))
        axis = a.get("axis", 1) % max(rank, 1)
        if a.get("block_size", 0):
            self.fail(node, "blocked quantisation (block_size) is not supported")
        scale = self._per_axis(node, "scale", 1, rank, axis)
        if len(node.input) > 2 and node.input[2]:
            zp = self._per_axis(node, "zero point", 2, rank, axis)
            return self.ew(node, node.output[0], [x, zp, scale], "({0} - {1}) * {2}", dtype="f32",
                           note="DequantizeLinear")
        self.ew(node, node.output[0], [x, scale], "{0} * {1}", dtype="f32", note="DequantizeLinear")
