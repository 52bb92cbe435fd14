// asc_probe_params.cpp — where the kernels' positional brace-initializers land. The kernels write
// `Nd2NzParams{1, mv, kv, 0, K, kBaseM, 1, 0}`, `LoadData2DParams{i, KB, MB, 0, 0, false, 0}`, ... : in CANN's
// API these braces call a constructor whose parameter order need not be the members' order; in WS1's emulator
// they initialise an aggregate in member order. asc_compile_check.py builds and runs this file once against each
// (the real headers with the host stub; the emulator) and compares the printed field values: a value that lands
// in another field on one side is a silent divergence no compile error shows. Distinct values per position
// (1, 2, 3, ...) make any permutation visible. Names ending in 0: default-constructed, their defaults printed.
#include <cstdint>
#include <cstdio>

#include "kernel_operator.h"

using namespace AscendC;

#define F(s, field) std::printf("%s.%s=%lld\n", #s, #field, static_cast<long long>(s.field))

int main() {
  // ws1_ascend_kernel.h: DataCopyExtParams{1, n * sizeof(T), 0, 0, 0}; distinct values here
  DataCopyExtParams dc{1, 2, 3, 4, 5};
  F(dc, blockCount), F(dc, blockLen), F(dc, srcStride), F(dc, dstStride), F(dc, rsv);
  DataCopyExtParams dc0;
  F(dc0, blockCount), F(dc0, blockLen), F(dc0, srcStride), F(dc0, dstStride), F(dc0, rsv);
  // DataCopyPadExtParams<T>{false, 0, 0, T{}}
  DataCopyPadExtParams<float> pad{true, 2, 3, 4.0f};
  F(pad, isPad), F(pad, leftPadding), F(pad, rightPadding), F(pad, paddingValue);
  DataCopyPadExtParams<float> pad0;
  F(pad0, isPad), F(pad0, leftPadding), F(pad0, rightPadding), F(pad0, paddingValue);
  // cube_gemm.h: Nd2NzParams{1, mv, kv, 0, K, kBaseM, 1, 0}
  Nd2NzParams nd{1, 2, 3, 4, 5, 6, 7, 8};
  F(nd, ndNum), F(nd, nValue), F(nd, dValue), F(nd, srcNdMatrixStride), F(nd, srcDValue), F(nd, dstNzC0Stride),
      F(nd, dstNzNStride), F(nd, dstNzMatrixStride);
  Nd2NzParams nd0;
  F(nd0, ndNum), F(nd0, nValue), F(nd0, dValue), F(nd0, srcNdMatrixStride), F(nd0, srcDValue),
      F(nd0, dstNzC0Stride), F(nd0, dstNzNStride), F(nd0, dstNzMatrixStride);
  // cube_gemm.h: LoadData2DParams{i, KB, MB, 0, 0, false, 0}
  LoadData2DParams ld{1, 2, 3, 4, 5, true, 7};
  F(ld, startIndex), F(ld, repeatTimes), F(ld, srcStride), F(ld, sid), F(ld, dstGap), F(ld, ifTranspose),
      F(ld, addrMode);
  LoadData2DParams ld0;
  F(ld0, startIndex), F(ld0, repeatTimes), F(ld0, srcStride), F(ld0, sid), F(ld0, dstGap), F(ld0, ifTranspose),
      F(ld0, addrMode);
  // cube_gemm.h: InitConstValueParams<T>{1, blocks, 0, T{}}
  InitConstValueParams<float> ic{1, 2, 3, 4.0f};
  F(ic, repeatTimes), F(ic, blockNum), F(ic, dstGap), F(ic, initValue);
  InitConstValueParams<float> ic0;
  F(ic0, repeatTimes), F(ic0, blockNum), F(ic0, dstGap), F(ic0, initValue);
  // cube_gemm.h: default-constructed MmadParams / FixpipeParamsV220, fields assigned one by one
  MmadParams mp0;
  F(mp0, m), F(mp0, n), F(mp0, k), F(mp0, isBias), F(mp0, fmOffset), F(mp0, enSsparse), F(mp0, enWinogradA),
      F(mp0, enWinogradB), F(mp0, unitFlag), F(mp0, kDirectionAlign), F(mp0, cmatrixSource), F(mp0, cmatrixInitVal);
  FixpipeParamsV220 fp0;
  F(fp0, nSize), F(fp0, mSize), F(fp0, srcStride), F(fp0, dstStride), F(fp0, reluEn), F(fp0, ndNum);
  // QuantMode_t's numeric values are the compiler's (the host stub's here): compare by name
  std::printf("fp0.quantPre==NoQuant=%d\n", fp0.quantPre == QuantMode_t::NoQuant ? 1 : 0);
  return 0;
}
