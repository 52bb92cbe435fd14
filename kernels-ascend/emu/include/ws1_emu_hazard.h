// ws1_emu_hazard.h — the emulator's model of an AI core's pipes, and the hazard checker built on it.
//
// On the device an AI core's scalar unit issues every instruction into one in-order queue per pipe (PIPE_S
// scalar, PIPE_V vector, PIPE_MTE2 GM->UB/L1, PIPE_MTE3 UB->GM, PIPE_MTE1 L1->L0A/L0B, PIPE_M cube, PIPE_FIX
// L0C->GM) and the queues run concurrently; even inside one queue an instruction may start before the previous
// one has finished ("PipeBarrier(ISASI).md", "基本架构.md" §典型的指令流). Two instructions that touch the same
// bytes, at least one of them writing, are ordered only by: PipeBarrier<pipe> (same pipe), PipeBarrier<PIPE_ALL>
// (everything issued before completes before anything after starts), SetFlag<SRC_DST>/WaitFlag<SRC_DST> (every
// SRC instruction issued before the SetFlag completes before any DST instruction issued after the WaitFlag),
// a TQue's EnQue/DeQue and FreeTensor/AllocTensor (the same flags, for that queue's own buffer), and what the
// bisheng compiler inserts by itself (--cce-auto-sync, on for <<<>>> builds; "关键特性说明.md" table 3).
// The emulator still executes every instruction at once, in program order — so a missing synchronization
// cannot change its numbers — and this file finds the missing synchronizations instead:
//
//  * every emulated instruction gets a sequence number on its pipe (cnt[pipe]) and records its byte ranges
//    (UB, L1, L0A, L0B, L0C offsets; GM writes by address) as reads or writes in a shadow map per space;
//  * each pipe p carries a vector clock vc[p]: vc[p][q] = the number of q's instructions known to have
//    completed before p's next instruction starts. PipeBarrier, PIPE_ALL and SetFlag/WaitFlag advance it
//    exactly as documented (a SetFlag carries the setter's whole clock, so orderings compose);
//  * a queue's flags give knowledge for that queue buffer's bytes only (Region::know): a TQue orders its own
//    buffers, never a TBuf beside them;
//  * the compiler's auto-sync (AIV: S<->V, S<->MTE2, S<->MTE3, V->V; nothing on AIC) is modelled as ordering
//    exactly the conflicting pair it was inserted for — never as a fence for anything else, since where the
//    compiler puts the pair is not documented;
//  * the Cube orders consecutive Mmads into one L0C by itself when (m/16)*(n/16) >= 10 ("Mmad.md" 同步优化说明);
//  * an access by pipe p to bytes last written (or read) by instruction i of pipe q is a HAZARD unless
//    vc[p][q] >= seq(i), the pair is auto-synced, or it is the same instruction. The kernel call then fails
//    with one message naming both instructions (API, source line, pipe), the bytes, and the buffer.
//
// GM: DMA writes (MTE3, FIX) and reads (MTE2 copies, scalar GetValue) are recorded, so a write that overtakes an
// earlier read (write after read) is caught as well as a read of data not yet written.
//
// MIXED kernels (KERNEL_TYPE_MIX_AIC_1_2: one AIC and two AIVs per block, "设置Kernel类型.md"): the three cores of a
// block run concurrently and meet only in GM, ordered by CrossCoreSetFlag / CrossCoreWaitFlag (mode 2, "核间同步/
// CrossCoreSetFlag(ISASI).md", "关键特性说明.md"). The clocks are therefore indexed by (core, pipe): a set on core c,
// pipe p completes when every earlier p instruction of c has, and carries c's knowledge; the wait (on A2/A3 it blocks
// EVERY pipe of the waiting core: CrossCoreWaitFlag(ISASI).md, "模板参数modeId和pipe不生效 ... 阻塞全部流水") hands it
// to all of that core's pipes. The block's GM shadow is shared by its three cores; UB, L1 and L0 are private.
// The scalar unit reads GM through a per-core data cache ("Scalar读写数据.md", "DataCacheCleanAndInvalid.md");
// a GlobalTensor::GetValue is an error unless the kernel ran DataCacheCleanAndInvalid(ENTIRE_DATA_CACHE) on this
// core first, and after any DMA write of this launch to the bytes read.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace ws1emu {
[[noreturn]] inline void fail(const std::string& what) { throw std::runtime_error("ascend emulator: " + what); }

// The caller's source position: every emulated API takes one trailing, defaulted `Where` (never written by
// a kernel) so a hazard message can name the line that issued each instruction.
struct Where {
  const char* file;
  int line;
  static Where here(const char* f = __builtin_FILE(), int l = __builtin_LINE()) { return {f, l}; }
};
inline const char* base_name(const char* f) {
  const char* b = f;
  for (const char* p = f; *p; ++p)
    if (*p == '/') b = p + 1;
  return b;
}

// Pipes, in AscendC::pipe_t order (kernel_operator.h), and the spaces an instruction touches.
enum Pipe : int { P_S = 0, P_V, P_M, P_MTE1, P_MTE2, P_MTE3, P_FIX, NPIPE };
inline const char* pipe_name(int p) {
  static const char* n[NPIPE] = {"PIPE_S", "PIPE_V", "PIPE_M", "PIPE_MTE1", "PIPE_MTE2", "PIPE_MTE3", "PIPE_FIX"};
  return n[p];
}
enum Space : int { SP_UB = 0, SP_L1, SP_L0A, SP_L0B, SP_L0C, SP_GM, NSPACE };
inline const char* space_name(int s) {
  static const char* n[NSPACE] = {"UB", "L1", "L0A", "L0B", "L0C", "GM"};
  return n[s];
}

// KernelMetaType (KERNEL_TASK_TYPE_DEFAULT): which pipes the core has ("核内同步能力概述.md" tables 2, 3).
enum CoreKind : int { CK_NONE = -1, CK_AIV = 0, CK_AIC = 1 };
inline bool core_has_pipe(int kind, int p) {
  if (kind == CK_AIV) return p == P_S || p == P_V || p == P_MTE2 || p == P_MTE3;
  if (kind == CK_AIC) return p != P_V;
  return false;
}
// What bisheng's --cce-auto-sync inserts by itself ("关键特性说明.md", 开启cce-auto-sync编译选项, table 3):
// on the vector core S<->V, S<->MTE2, S<->MTE3 both ways and V->V; on the cube core nothing. S->S is the
// scalar unit's own program order (hardware).
inline bool auto_synced(int kind, int from, int to) {
  if (from == P_S && to == P_S) return true;
  if (kind != CK_AIV) return false;
  if (from == P_V && to == P_V) return true;
  if (from == P_S) return to == P_V || to == P_MTE2 || to == P_MTE3;
  if (to == P_S) return from == P_V || from == P_MTE2 || from == P_MTE3;
  return false;
}

// Cores of one block: slot 0 is the AIC (or the only core of an AIV_ONLY / AIC_ONLY launch), 1 and 2 the AIVs of a
// mixed block (sub-block 0 and 1).
constexpr int NCS = 3;
inline const char* core_slot_name(int kind, int slot, bool mixed) {
  if (!mixed) return kind == 1 ? "AIC" : "AIV";
  return slot == 0 ? "AIC" : slot == 1 ? "AIV0" : "AIV1";
}

struct Clock {  // v[c][q]: how many of core c's pipe-q instructions are known complete
  uint64_t v[NCS][NPIPE] = {};
  void join(const Clock& o) {
    for (int c = 0; c < NCS; ++c)
      for (int i = 0; i < NPIPE; ++i) v[c][i] = v[c][i] > o.v[c][i] ? v[c][i] : o.v[c][i];
  }
};

struct Instr {  // one issued instruction
  const char* name = "";
  const char* file = "";
  int line = 0;
  int pipe = 0;
  int core = 0;       // its core slot in the block (NCS)
  uint64_t seq = 0;   // its number on its pipe (1, 2, ...)
  uint64_t gseq = 0;  // its number in the core's issue order
  bool big_mmad = false;  // an Mmad with (m/16)*(n/16) >= 10
};
inline bool& describe_cores() {  // name the core in messages (mixed launches)
  static thread_local bool b = false;
  return b;
}
inline std::string describe(const Instr& i) {
  std::ostringstream o;
  if (describe_cores()) o << (i.core == 0 ? "AIC " : i.core == 1 ? "AIV0 " : "AIV1 ");
  o << pipe_name(i.pipe) << " " << i.name << " (" << base_name(i.file) << ":" << i.line << ")";
  return o.str();
}

// A named buffer (TBuf or one TQue buffer). know[p]: what pipe p has learned through this queue buffer's own
// flags — valid for accesses inside [lo, hi) only.
struct Region {
  int space = SP_UB;
  uint64_t lo = 0, hi = 0;
  std::string name;
  bool queue = false;
  Clock know[NPIPE];
};

struct SegState {
  bool has_w = false;
  Instr w;
  bool has_r[NCS][NPIPE] = {};
  Instr r[NCS][NPIPE];  // the last read by each (core, pipe) (later reads of one pipe imply the earlier ones)
};
struct Seg {
  uint64_t hi;
  SegState s;
};

struct Flag {
  bool set = false;
  Clock c;
  Region* scope = nullptr;  // a queue's flag orders that buffer only
  Instr at;
};

// What one kernel launch did, summed over its cores (the emulator's operation counts, docs/ascend.md "Cost model"):
// instructions per pipe, GM bytes read / written per pipe, on-chip bytes moved per pipe, Cube MACs as issued
// (m * n * k per Mmad, padding included), vector element-operations (the count of every PIPE_V instruction).
struct Counts {
  uint64_t launches = 0, blocks = 0;
  uint64_t instr[NPIPE] = {}, gm_read[NPIPE] = {}, gm_write[NPIPE] = {}, local_write[NPIPE] = {};
  uint64_t mmad_macs = 0, vec_elems = 0, cross_flags = 0;
};

// One block of a mixed launch: what its three cores share — the GM shadow and the cross-core flag counters.
struct CrossFlag {  // one flagId's counter on one core, with the clocks its sets carried (FIFO)
  std::vector<Clock> q;
  Instr at;
};
struct Group {
  std::map<uint64_t, Seg> gm;
  CrossFlag ctr[NCS][16];          // a core's counter per flagId (mode 2): sets addressed to it, not yet waited
  std::vector<Clock> aiv_set[2][16];  // mode 2, AIV -> AIC: each AIV's sets; the AIC's counter rises when both have
  Instr aiv_at[2][16];
};

struct Hazards {
  int kind = CK_NONE;
  const char* kernel = "";
  int64_t block = 0;
  int cid = 0;              // this core's slot in its block (NCS)
  bool mixed = false;       // launched as KERNEL_TYPE_MIX_AIC_1_2
  Group* group = nullptr;   // mixed: the block's shared state
  uint64_t cnt[NPIPE] = {};
  uint64_t gseq = 0;
  Clock vc[NPIPE];
  std::map<uint64_t, Seg> shadow[NSPACE];
  std::map<std::pair<int, int>, Flag> flags;  // (HardEvent, event id)
  std::vector<std::unique_ptr<Region>> regions;
  bool dcci = false;  // DataCacheCleanAndInvalid(ENTIRE_DATA_CACHE) issued on this core in this launch
  uint64_t dcci_gseq = 0;
  int hf32 = -1;  // SetHF32Mode: -1 never set in this launch, 0 off, 1 on
  Counts* counts = nullptr;  // the launch's counters (shared by its cores)

  void reset(const char* k, int64_t b, int slot = 0, bool mix = false, Group* g = nullptr, Counts* c = nullptr) {
    *this = Hazards();
    kernel = k;
    block = b;
    cid = slot, mixed = mix, group = g, counts = c;
    describe_cores() = mix;
  }
  std::map<uint64_t, Seg>& space_map(int space) { return space == SP_GM && group ? group->gm : shadow[space]; }

  [[noreturn]] void error(const std::string& what) const {
    std::ostringstream o;
    o << "hazard in kernel '" << kernel << "' (block " << block;
    if (mixed) o << ", " << core_slot_name(kind, cid, true);
    o << "): " << what;
    fail(o.str());
  }

  Instr begin(int pipe, const char* name, const Where& w, bool big_mmad = false) {
    if (kind == CK_NONE)
      error(std::string(name) + " before KERNEL_TASK_TYPE_DEFAULT: the kernel must declare AIV, AIC or MIX");
    if (!core_has_pipe(kind, pipe))
      error(std::string(pipe_name(pipe)) + " " + name + " (" + base_name(w.file) + ":" + std::to_string(w.line) +
            ") on " + (kind == CK_AIV ? "a vector (AIV)" : "a cube (AIC)") + " core, which has no such pipe");
    Instr i;
    i.name = name, i.file = w.file, i.line = w.line, i.pipe = pipe, i.core = cid, i.seq = ++cnt[pipe], i.gseq = ++gseq;
    i.big_mmad = big_mmad;
    if (counts) ++counts->instr[pipe];
    return i;
  }
  // the scalar unit runs its own instructions in order: each completes before the next one starts
  void end(const Instr& i) {
    if (i.pipe == P_S) vc[P_S].v[cid][P_S] = i.seq;
  }

  Region* region_at(int space, uint64_t x) const {
    if (space == SP_GM) return nullptr;
    for (auto& r : regions)
      if (r->space == space && r->lo <= x && x < r->hi) return r.get();
    return nullptr;
  }
  std::string where(int space, uint64_t lo, uint64_t hi) const {
    std::ostringstream o;
    o << space_name(space) << " bytes [0x" << std::hex << lo << ", 0x" << hi << ")" << std::dec;
    if (Region* r = region_at(space, lo)) o << " of " << r->name;
    return o.str();
  }

  bool ordered(const Instr& a, const Instr& b, const Clock& k, int space) const {
    if (a.core == b.core && a.pipe == b.pipe && a.seq == b.seq) return true;  // one instruction, its own bytes
    if (k.v[a.core][a.pipe] >= a.seq) return true;
    if (a.core != b.core) return false;  // nothing but a cross-core flag orders two cores
    if (auto_synced(kind, a.pipe, b.pipe)) return true;
    if (space == SP_L0C && a.pipe == P_M && b.pipe == P_M && a.big_mmad && b.big_mmad) return true;
    return false;
  }
  [[noreturn]] void conflict(const Instr& a, bool a_writes, const Instr& b, bool b_writes, int space, uint64_t lo,
                             uint64_t hi) const {
    std::ostringstream o;
    o << describe(b) << " " << (b_writes ? "writes " : "reads ") << where(space, lo, hi) << " while "
      << describe(a) << ", issued earlier, " << (a_writes ? "writes" : "reads") << " them: no ";
    if (a.core != b.core)
      o << "CrossCoreSetFlag/CrossCoreWaitFlag orders " << core_slot_name(kind, a.core, true) << " "
        << pipe_name(a.pipe) << " -> " << core_slot_name(kind, b.core, true) << " " << pipe_name(b.pipe);
    else
      o << "SetFlag/WaitFlag, PipeBarrier, queue EnQue/DeQue or compiler auto-sync orders " << pipe_name(a.pipe)
        << " -> " << pipe_name(b.pipe);
    o << " here (" << (a_writes ? (b_writes ? "write after write" : "read after write") : "write after read") << ")";
    error(o.str());
  }

  // One access of instruction `i` to [lo, hi) of `space`.
  void access(const Instr& i, int space, uint64_t lo, uint64_t hi, bool write) {
    if (hi <= lo) return;
    if (counts) {
      if (space == SP_GM) (write ? counts->gm_write : counts->gm_read)[i.pipe] += hi - lo;
      else if (write) counts->local_write[i.pipe] += hi - lo;
    }
    Clock k = vc[i.pipe];
    if (space != SP_GM)
      for (auto& r : regions)
        if (r->queue && r->space == space && r->lo <= lo && hi <= r->hi) k.join(r->know[i.pipe]);
    auto& m = space_map(space);
    split(m, lo);
    split(m, hi);
    uint64_t cur = lo;
    auto it = m.lower_bound(lo);
    while (cur < hi) {
      if (it == m.end() || it->first >= hi) {
        m.emplace(cur, fresh(i, hi, write));
        break;
      }
      if (it->first > cur) {
        m.emplace(cur, fresh(i, it->first, write));
        cur = it->first;
        continue;
      }
      SegState& s = it->second.s;
      const uint64_t shi = it->second.hi;
      if (s.has_w && !ordered(s.w, i, k, space)) conflict(s.w, true, i, write, space, cur, shi);
      if (write) {
        for (int c = 0; c < NCS; ++c)
          for (int q = 0; q < NPIPE; ++q)
            if (s.has_r[c][q] && !ordered(s.r[c][q], i, k, space)) conflict(s.r[c][q], false, i, true, space, cur, shi);
        s = SegState();
        s.has_w = true, s.w = i;
      } else {
        s.has_r[i.core][i.pipe] = true, s.r[i.core][i.pipe] = i;
      }
      cur = shi;
      ++it;
    }
  }
  static Seg fresh(const Instr& i, uint64_t hi, bool write) {
    Seg g{hi, SegState()};
    if (write) g.s.has_w = true, g.s.w = i;
    else g.s.has_r[i.core][i.pipe] = true, g.s.r[i.core][i.pipe] = i;
    return g;
  }
  static void split(std::map<uint64_t, Seg>& m, uint64_t at) {
    auto it = m.upper_bound(at);
    if (it == m.begin()) return;
    --it;
    if (it->first < at && it->second.hi > at) {
      Seg right = it->second;
      it->second.hi = at;
      m.emplace(at, right);
    }
  }

  // PipeBarrier<PIPE_ALL>: everything issued so far on this core completes before anything later starts.
  void barrier_all() {
    for (int p = 0; p < NPIPE; ++p)
      for (int q = 0; q < NPIPE; ++q) vc[p].v[cid][q] = cnt[q];
    for (int p = 0; p < NPIPE; ++p)
      for (int p2 = 0; p2 < NPIPE; ++p2) vc[p].join(vc[p2]);
    // this core's records are all complete now: its private spaces can be forgotten; a mixed block's shared GM
    // shadow keeps them (another core may not know they completed)
    for (int s = 0; s < NSPACE; ++s)
      if (!(s == SP_GM && group)) shadow[s].clear();
  }
  // PipeBarrier<p>: p's earlier instructions complete before its later ones start.
  void barrier(int p) { vc[p].v[cid][p] = cnt[p]; }

  void set_flag(int event, int id, int src, int dst, Region* scope, const Where& w, const char* what) {
    if (!core_has_pipe(kind, src) || !core_has_pipe(kind, dst))
      error(std::string(what) + " between " + pipe_name(src) + " and " + pipe_name(dst) + " (" + base_name(w.file) +
            ":" + std::to_string(w.line) + "): not a pipe pair of this core");
    Flag& f = flags[{event, id}];
    if (f.set)
      error(std::string(what) + " " + pipe_name(src) + " -> " + pipe_name(dst) + " event id " + std::to_string(id) +
            " (" + base_name(w.file) + ":" + std::to_string(w.line) + ") while the same flag, set at " +
            base_name(f.at.file) + ":" + std::to_string(f.at.line) +
            ", was not yet waited for (undefined behaviour, \"SetFlag-WaitFlag(ISASI).md\")");
    f.set = true;
    f.scope = scope;
    f.c = vc[src];
    if (scope) f.c.join(scope->know[src]);
    f.c.v[cid][src] = cnt[src];  // every src instruction issued so far has completed when the flag is set
    f.at.file = w.file, f.at.line = w.line;
  }
  void wait_flag(int event, int id, int src, int dst, Region* scope, const Where& w, const char* what) {
    auto it = flags.find({event, id});
    if (it == flags.end() || !it->second.set)
      error(std::string(what) + " " + pipe_name(src) + " -> " + pipe_name(dst) + " event id " + std::to_string(id) +
            " (" + base_name(w.file) + ":" + std::to_string(w.line) +
            ") with no SetFlag pending: the pipe would wait forever");
    Flag& f = it->second;
    if (f.scope != scope)
      error(std::string(what) + " (" + base_name(w.file) + ":" + std::to_string(w.line) +
            ") waits for a flag that another queue or user code set (event id collision)");
    if (scope) scope->know[dst].join(f.c);
    else vc[dst].join(f.c);
    f.set = false;
  }

  // CrossCoreSetFlag<mode 2, pipe>(id), issued on `pipe`: it completes when every earlier `pipe` instruction of this
  // core has, and carries what `pipe` knew. Mode 2 (one AI core): the AIC's set raises the counter of BOTH AIVs; the
  // AIC's counter rises once BOTH AIVs have set ("关键特性说明.md", 单AI Core中AIC与AIV全核同步). Counters hold 0-15.
  void cross_set(int pipe, int id, const Where& w) {
    if (!mixed || !group)
      error(std::string("CrossCoreSetFlag (") + base_name(w.file) + ":" + std::to_string(w.line) +
            ") in a kernel not launched as KERNEL_TYPE_MIX_AIC_1_2: the scheduling module that carries cross-core "
            "flags is not started for AIV_ONLY / AIC_ONLY kernels (CrossCoreSetFlag(ISASI).md, 约束说明)");
    const Instr i = begin(pipe, "CrossCoreSetFlag", w);
    if (counts) ++counts->cross_flags;
    Clock c = vc[pipe];
    c.v[cid][pipe] = cnt[pipe];
    auto bump = [&](int to, const Clock& carried, const Instr& at) {
      CrossFlag& f = group->ctr[to][id];
      if (f.q.size() >= 15)
        error("CrossCoreSetFlag flagId " + std::to_string(id) + " (" + base_name(w.file) + ":" +
              std::to_string(w.line) + "): the waiting core's counter would pass 15 (CrossCoreSetFlag(ISASI).md)");
      f.q.push_back(carried);
      f.at = at;
    };
    if (cid == 0) {
      bump(1, c, i);
      bump(2, c, i);
    } else {
      group->aiv_set[cid - 1][id].push_back(c);
      group->aiv_at[cid - 1][id] = i;
      auto& a = group->aiv_set[0][id];
      auto& b = group->aiv_set[1][id];
      if (!a.empty() && !b.empty()) {
        Clock both = a.front();
        both.join(b.front());
        a.erase(a.begin());
        b.erase(b.begin());
        bump(0, both, i);
      }
    }
  }
  // CrossCoreWaitFlag(id): true when a set is pending (consumed; its clock reaches every pipe of this core — on A2/A3
  // the wait blocks all pipes), false when the core must block.
  bool cross_try_wait(int id) {
    CrossFlag& f = group->ctr[cid][id];
    if (f.q.empty()) return false;
    const Clock c = f.q.front();
    f.q.erase(f.q.begin());
    for (int p = 0; p < NPIPE; ++p) vc[p].join(c);
    return true;
  }

  // at the end of a block: a user SetFlag nobody waited for is an error (they must pair)
  void finish() const {
    for (auto& kv : flags)
      if (kv.second.set && !kv.second.scope)
        error(std::string("SetFlag at ") + base_name(kv.second.at.file) + ":" + std::to_string(kv.second.at.line) +
              " never waited for (SetFlag and WaitFlag must pair)");
  }
};

// at the end of a mixed block: every cross-core set must have been waited for ("用户需要确保配套使用 ... 否则会出现未定义行为")
inline void finish_group(const Group& g, const char* kernel, int64_t block) {
  auto bad = [&](const char* who, int id, const Instr& at) {
    std::ostringstream o;
    o << "hazard in kernel '" << kernel << "' (block " << block << "): CrossCoreSetFlag flagId " << id << " at "
      << base_name(at.file) << ":" << at.line << " never waited for by " << who
      << " (CrossCoreSetFlag and CrossCoreWaitFlag must pair)";
    fail(o.str());
  };
  for (int id = 0; id < 16; ++id) {
    if (!g.ctr[0][id].q.empty()) bad("the AIC", id, g.ctr[0][id].at);
    if (!g.ctr[1][id].q.empty()) bad("AIV0", id, g.ctr[1][id].at);
    if (!g.ctr[2][id].q.empty()) bad("AIV1", id, g.ctr[2][id].at);
    if (!g.aiv_set[0][id].empty()) bad("the AIC (only AIV0 set it)", id, g.aiv_at[0][id]);
    if (!g.aiv_set[1][id].empty()) bad("the AIC (only AIV1 set it)", id, g.aiv_at[1][id]);
  }
}
}  // namespace ws1emu
