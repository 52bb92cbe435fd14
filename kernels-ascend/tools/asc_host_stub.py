"""The host stand-ins asc_compile_check.py needs to compile against asc-devkit's headers without CANN.

asc-devkit's CPU-debug build (``ASCENDC_CPU_DEBUG=1``, the mode its tests/api/basic_api/ascendc_header_checker
compiles with g++) includes four headers it does not ship: ``stub_def.h``, ``stub_fun.h``, ``kernel_fp16.h`` and
``kernel_bf16.h`` come from CANN's binary ``tools/tikicpulib/lib/include`` (the CPU models of the bisheng
built-ins), ``simt_stub.h`` likewise; and ``kernel_tiling/kernel_tiling.h`` is generated at build time from
``include/adv_api/**/*tilingdata.h``. None of them is public. This module writes WS1's OWN minimal versions:

* every kernel-language qualifier (``__aicore__``, ``__gm__``, ``__ubuf__``, ...) as nothing;
* the scalar types ``half`` / ``bfloat16_t`` (and the fp8/fp4 names the headers alias) as opaque 16/8-bit
  classes — no arithmetic is checked through them;
* the enums the built-ins take (``pipe_t``, ``event_t``, ``QuantMode_t``, ...) with the enumerator NAMES
  asc-devkit's headers use; their numeric values are invented (nothing here depends on them);
* every bisheng intrinsic the dav-2201 implementation headers call (``copy_gm_to_ubuf``, ``vadd``, ``mad``,
  ``set_flag``, ...) as a template that accepts ANY arguments.

So a compile with this stub checks OUR calls against the real API's declarations and instantiates the real
implementation templates down to the intrinsic layer — and nothing below it: whether asc-devkit calls an
intrinsic with the right arguments is not checked (that is CANN's business and needs bisheng). The intrinsic
list was collected by compiling kernel_operator.h and every kernels-ascend TU for dav-2201 AIV and AIC; an
intrinsic missing from it shows as a "host_stub" diagnostic (a limit of this check, never a kernel bug).
"""

from __future__ import annotations

import re
from pathlib import Path

QUALIFIERS = [
    "__aicore__",
    "__global__",
    "__gm__",
    "__ubuf__",
    "__cbuf__",
    "__ca__",
    "__cb__",
    "__cc__",
    "__fbuf__",
    "__ssbuf__",
    "__sync_alias__",
    "__sync_noalias__",
    "__check_sync_alias__",
    "__simd_callee__",
    "__simd_vf__",
    "__host_aicore__",
    "__host__",
    "__disable_kernel_type_autoinfer__",
    "ASCENDC_HOST_AICORE",
    "ASCENDC_HOST",
    "ASCENDC_AICORE",
    "__BLOCK_LOCAL__",
    "__WORKGROUP_LOCAL__",
]
PIPE_ANNOTATIONS = ["__inout_pipe__", "__in_pipe__", "__out_pipe__"]

# the built-in enums, enumerator names as asc-devkit's headers spell them (values invented)
ENUMS = {
    "enum pipe_t": [
        "PIPE_S",
        "PIPE_V",
        "PIPE_M",
        "PIPE_MTE1",
        "PIPE_MTE2",
        "PIPE_MTE3",
        "PIPE_ALL",
        "PIPE_MTE4",
        "PIPE_MTE5",
        "PIPE_V2",
        "PIPE_FIX",
    ],
    "enum event_t": [f"EVENT_ID{i}" for i in range(8)],
    "enum class QuantMode_t": [
        "NoQuant",
        "F322F16",
        "F322BF16",
        "DEQF16",
        "VDEQF16",
        "QF322B8_PRE",
        "VQF322B8_PRE",
        "REQ8",
        "VREQ8",
        "DEQS16",
        "VDEQS16",
        "QF162B8_PRE",
        "QF162S16_PRE",
        "QF162S4_PRE",
        "QF322BF16_PRE",
        "QF322F16_PRE",
        "QF322F32_PRE",
        "QF322FP8_PRE",
        "QF322HIF8_PRE",
        "QF322HIF8_PRE_HYBRID",
        "QS322BF16_PRE",
        "REQ4",
        "VQF162B8_PRE",
        "VQF162S16_PRE",
        "VQF162S4_PRE",
        "VQF322BF16_PRE",
        "VQF322F16_PRE",
        "VQF322F32_PRE",
        "VQF322FP8_PRE",
        "VQF322HIF8_PRE",
        "VQF322HIF8_PRE_HYBRID",
        "VQS322BF16_PRE",
        "VREQ4",
    ],
    "enum class dcci_dst_t": ["CACHELINE_ALL", "CACHELINE_UB", "CACHELINE_OUT", "CACHELINE_ATOMIC"],
    "enum class cache_line_t": ["SINGLE_CACHE_LINE", "ENTIRE_DATA_CACHE"],
    "enum class Order_t": ["VALUE_INDEX", "INDEX_VALUE", "ONLY_VALUE", "ONLY_INDEX"],
    "enum atomic_type_t": ["WS1_STUB_ATOMIC_TYPE_"],
    "enum atomic_op_t": ["WS1_STUB_ATOMIC_OP_"],
    "enum mem_dsb_t": ["WS1_STUB_MEM_DSB_"],
    "enum mem_t": ["WS1_STUB_MEM_"],
    "enum class pad_t": ["PAD_NONE"],
    "enum addr_cal_mode_t": ["inc", "dec"],
    "enum ws1_stub_va_reg_t": [f"VA{i}" for i in range(8)],
    "enum ws1_stub_vld_half_t": ["L128", "H128"],
}
# register / vector types of the built-in language (only named by dav-c310 code paths the headers parse)
OPAQUE_TYPES = [
    "MaskReg",
    "AddrReg",
    "UnalignRegForLoad",
    "UnalignRegForStore",
    "vector_bool",
    "vector_align",
    "vector_address",
]
SMALL_FLOAT_TYPES = {"fp4x2_e1m2_t": 8, "fp4x2_e2m1_t": 8, "fp8_e4m3fn_t": 8, "fp8_e5m2_t": 8, "fp8_e8m0_t": 8}

# intrinsics: (names, what the stub returns). Any arguments are accepted.
_VCONV = (
    "bf162f32 bf162s32a bf162s32c bf162s32f bf162s32r bf162s32z deq f162f32 f162s16a f162s16c f162s16f f162s16r "
    "f162s16z f162s32a f162s32c f162s32f f162s32r f162s32z f162s4 f162s4a f162s4c f162s4f f162s4r f162s4z f162s8 "
    "f162s8a f162s8c f162s8f f162s8r f162s8z f162u8 f162u8a f162u8c f162u8f f162u8r f162u8z f322bf16a f322bf16c "
    "f322bf16f f322bf16r f322bf16z f322f16 f322f16a f322f16c f322f16f f322f16o f322f16r f322f16z f322f32a f322f32c "
    "f322f32f f322f32r f322f32z f322s16a f322s16c f322s16f f322s16r f322s16z f322s32a f322s32c f322s32f f322s32r "
    "f322s32z f322s64a f322s64c f322s64f f322s64r f322s64z s162f16 s162f16a s162f16c s162f16f s162f16r s162f16z "
    "s162f32 s322f32 s322f32a s322f32c s322f32f s322f32r s322f32z s322s16 s322s64 s42f16 s642f32a s642f32c s642f32f "
    "s642f32r s642f32z s642s32 s82f16 u82f16"
).split()
INTRINSICS_VOID = (
    (
        "copy_cbuf_to_bt copy_cbuf_to_fbuf copy_cbuf_to_gm copy_gm_to_cbuf copy_gm_to_cbuf_multi_nd2nz_b16 "
        "copy_gm_to_cbuf_multi_nd2nz_b32s copy_gm_to_cbuf_multi_nd2nz_b8 copy_gm_to_ubuf copy_gm_to_ubuf_align_b16 "
        "copy_gm_to_ubuf_align_b32 copy_matrix_cc_to_gm copy_ubuf_to_gm copy_ubuf_to_gm_align_b16 "
        "copy_ubuf_to_gm_align_b32 copy_ubuf_to_ubuf dc_preload dcci dsb ffts_cross_core_sync hset_flag hwait_flag "
        "img2colv2_cbuf_to_ca img2colv2_cbuf_to_ca_s4 img2colv2_cbuf_to_cb ld_dev load_cbuf_to_ca load_cbuf_to_ca_s4 "
        "load_cbuf_to_cb load_cbuf_to_cb_s4 load_cbuf_to_cb_sp load_cbuf_to_cb_transpose_s4 mad mad_sp pipe_barrier "
        "preload scatter_vnchwconv_b16 scatter_vnchwconv_b32 scatter_vnchwconv_b8 set_atomic_add set_atomic_bf16 "
        "set_atomic_f16 set_atomic_f32 set_atomic_max set_atomic_min set_atomic_none set_atomic_s16 set_atomic_s32 "
        "set_atomic_s8 set_cmpmask set_ctrl set_data_exp_0 set_data_exp_1 set_data_exp_2 set_data_exp_3 set_deqscale "
        "set_ffts_base_addr set_flag set_fmatrix set_fmatrix_b set_fpc set_l1_3d_size set_l3d_rpt set_mask_count "
        "set_mask_norm set_mov_pad_val set_nd_para set_padding set_quant_pre set_st_atomic_cfg set_va_reg_sb "
        "set_vector_mask st_dev trap vabs vadd vadds vand vbrcb vcadd vcgadd vcgmax vcmax vcmin vcmpv_eq vcmpv_ge "
        "vcmpv_gt vcmpv_le vcmpv_lt vcmpv_ne vcmpvs_eq vcmpvs_ge vcmpvs_gt vcmpvs_le vcmpvs_lt vcmpvs_ne vcopy vdiv "
        "vector_dup vexp vgather vld_va_reg vln vmax vmaxs vmin vmins vmul vmulconv_f162s8 vmulconv_f162u8 vmuls vnot "
        "vor vrec vreducev2 vsel vshr vsqrt vsub vtranspose wait_flag wait_flag_dev "
        "AscendCBufEnque AscendCBufFree AscendCRecordPoolHierarchy AscendCTBufPoolInit AscendCTBufPoolResetCheck "
        "AscendCUpdateTbufPoolStatus __ib_set_stub __ib_wait_stub __sync_all_stub"
    ).split()
    + [f"set_aipp_spr_{i}" for i in (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 18, 19, 20, 21)]
    + [f"vconv_{s}" for s in _VCONV]
)
INTRINSICS_INT = (
    "bcnt0 bcnt1 clz create_ca_matrix create_ca_matrix_bf16 create_cb_matrix create_cb_matrix_bf16 "
    "create_cbuf_matrix create_cbuf_matrix_bf16 get_acc_val get_arch_ver get_block_idx get_block_num get_ctrl "
    "get_icache_prl_st get_max_min_cnt get_pc get_rsvd_cnt get_st_atomic_cfg get_vms4_sr sbitset0 sbitset1 sff0 sff1 "
    "sflbits AscendCBufAbsAddr AscendCBufAlloc AscendCBufDeque AscendCBufGet AscendCBufInit AscendCQueCreate"
).split()
# scalar conversions whose result is converted to half / int32 / ...
INTRINSICS_ANY = "conv_f322f16o conv_f322s32a conv_f322s32c conv_f322s32f conv_f322s32r".split()

HEADER = """\
// WS1 host stub of CANN's tikicpulib headers (NOT CANN's): written by kernels-ascend/tools/asc_host_stub.py
// for asc_compile_check.py. Qualifiers are empty, scalar types opaque, intrinsics accept any arguments.
#pragma once
#include <cassert>
#include <cstdint>
#include <iostream>
#include <vector>
"""


def stub_def_h() -> str:
    out = [HEADER]
    out += [f"#define {q}" for q in QUALIFIERS]
    out += [f"#define {p}(...)" for p in PIPE_ANNOTATIONS]
    for name in ("half", "bfloat16_t"):
        out.append(
            f"struct {name} {{ uint16_t bits; {name}() = default; {name}(float) : bits(0) {{}} "
            "operator float() const { return 0.0f; } float ToFloat() const { return 0.0f; } };"
        )
    out += [f"struct {n} {{ uint8_t bits; }};" for n in SMALL_FLOAT_TYPES]
    out += [f"struct {n} {{}};" for n in OPAQUE_TYPES]
    out += [f"{kind} {{ {', '.join(vals)} }};" for kind, vals in ENUMS.items()]
    out.append("struct ws1_stub_any { template <class T> operator T() const { return T(); } };")
    out.append("extern int64_t block_idx, sub_block_idx, g_taskRation;")
    out.append("extern uint64_t g_fixpipeNdNzParam;")
    out.append("namespace AscendC { extern bool g_isVdeq; constexpr int32_t AIC_TYPE = 1, AIV_TYPE = 2; }")
    out += [f"template <class... A> inline void {n}(A&&...) {{}}" for n in sorted(set(INTRINSICS_VOID))]
    out += [f"template <class... A> inline int64_t {n}(A&&...) {{ return 0; }}" for n in sorted(set(INTRINSICS_INT))]
    out += [
        f"template <class... A> inline ws1_stub_any {n}(A&&...) {{ return {{}}; }}" for n in sorted(set(INTRINSICS_ANY))
    ]
    return "\n".join(out) + "\n"


EMPTY_HEADERS = ("stub_fun.h", "kernel_fp16.h", "kernel_bf16.h", "simt_stub.h")

_TILING = re.compile(
    r"^\s*(BEGIN_TILING_DATA_DEF|TILING_DATA_FIELD_DEF_ARR|TILING_DATA_FIELD_DEF_STRUCT|TILING_DATA_FIELD_DEF|"
    r"END_TILING_DATA_DEF)\s*(?:\(([^)]*)\))?",
    re.M,
)


def kernel_tiling_h(asc: Path) -> str:
    """kernel_tiling/kernel_tiling.h from asc-devkit's include/**/*tilingdata.h: each BEGIN_TILING_DATA_DEF(Name)
    ... END_TILING_DATA_DEF block as a plain struct in AscendC::tiling (the layout the macros declare), exported
    to the global namespace as CANN's generated header does for these legacy names."""
    body, names = [], []
    for f in sorted((asc / "include").rglob("*tilingdata.h")):
        for kind, args in _TILING.findall(f.read_text(errors="replace")):
            a = [x.strip() for x in args.split(",")] if args else []
            if kind == "BEGIN_TILING_DATA_DEF":
                body.append(f"struct {a[0]} {{")
                names.append(a[0])
            elif kind == "TILING_DATA_FIELD_DEF_ARR":
                body.append(f"  {a[0]} {a[2]}[{a[1]}] = {{}};")
            elif kind == "TILING_DATA_FIELD_DEF_STRUCT":
                body.append(f"  {a[0]} {a[1]};")
            elif kind == "TILING_DATA_FIELD_DEF":
                body.append(f"  {a[0]} {a[1]} = 0;")
            else:
                body.append("};")
    return (
        "// generated by kernels-ascend/tools/asc_host_stub.py from asc-devkit's *tilingdata.h (WS1's code)\n"
        "#pragma once\n#include <cstdint>\n#include <cstring>\nnamespace AscendC {\nnamespace tiling {\n"
        + "\n".join(body)
        + "\n}  // namespace tiling\n}  // namespace AscendC\n"
        + "".join(f"using AscendC::tiling::{n};\n" for n in names)
    )


def write(dest: Path, asc: Path) -> None:
    """Write the stub headers into dest (an include directory)."""
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "stub_def.h").write_text(stub_def_h())
    for name in EMPTY_HEADERS:
        (dest / name).write_text("// WS1 host stub (empty): see stub_def.h\n#pragma once\n")
    (dest / "kernel_tiling").mkdir(exist_ok=True)
    (dest / "kernel_tiling" / "kernel_tiling.h").write_text(kernel_tiling_h(asc))
