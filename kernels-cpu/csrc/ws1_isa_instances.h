// The one ISA preamble of the ws1_math.h kernels (rms_norm, rope, attention, activation, logprob):
// it compiles the including kernel file's WS1_KERNEL_BODY part once per ISA path. A kernel file reads
//
//   #ifndef WS1_KERNEL_BODY
//   #include <...>                       // every header the body needs, BEFORE the ISA regions
//   #define WS1_KERNEL_NS ws1_xyz         // the kernel's namespace
//   #include "ws1_isa_instances.h"        // -> ws1_xyz::vs / v2 / v5, each holding the body below
//   ... host code: argument checks, WS1_SELECT(ws1_xyz, fn) per op call, TORCH_LIBRARY_FRAGMENT ...
//   #else  // WS1_KERNEL_BODY
//   ... ISA-specific code, written once against ws1_math.h's V (16 float lanes), lane_dot, vexp ...
//   #endif
//
// This header includes ws1_math.h and then the kernel file itself, with WS1_KERNEL_BODY defined:
//   namespace WS1_KERNEL_NS { namespace vs { using namespace ::ws1::vs; <body> } }   default target
//   WS1_BEGIN_AVX2    namespace WS1_KERNEL_NS { namespace v2 { using namespace ::ws1::v2; <body> } }  WS1_END_ISA
//   WS1_BEGIN_AVX512  namespace WS1_KERNEL_NS { namespace v5 { using namespace ::ws1::v5; <body> } }  WS1_END_ISA
// Why textual inclusion and not a template over V: ws1_math.h, "Compilation trick".
//
// The kernel file is found as __BASE_FILE__ (GCC/Clang: the translation unit's main file), so include
// this header only from a kernel .cpp that is compiled as its own translation unit (setup.py compiles
// every csrc/*.cpp), and only once per file.
#ifndef WS1_KERNEL_NS
#error "define WS1_KERNEL_NS (the kernel's namespace) before including ws1_isa_instances.h"
#endif
#ifdef WS1_KERNEL_BODY
#error "ws1_isa_instances.h is included from the kernel file's host part, not from its WS1_KERNEL_BODY part"
#endif

#include "ws1_math.h"

#define WS1_KERNEL_BODY
namespace WS1_KERNEL_NS {
namespace vs {
using namespace ::ws1::vs;
#include __BASE_FILE__
}  // namespace vs
}  // namespace WS1_KERNEL_NS
WS1_BEGIN_AVX2
namespace WS1_KERNEL_NS {
namespace v2 {
using namespace ::ws1::v2;
#include __BASE_FILE__
}  // namespace v2
}  // namespace WS1_KERNEL_NS
WS1_END_ISA
WS1_BEGIN_AVX512
namespace WS1_KERNEL_NS {
namespace v5 {
using namespace ::ws1::v5;
#include __BASE_FILE__
}  // namespace v5
}  // namespace WS1_KERNEL_NS
WS1_END_ISA
#undef WS1_KERNEL_BODY
#undef WS1_KERNEL_NS
