"""The emulator's hazard checker (emu/include/ws1_emu_hazard.h): planted missing synchronizations must fail the
kernel call with a message naming both instructions, their pipes and the bytes; their corrected forms must run.
The probe kernels are in emu/csrc/hazard_probes.h. The real kernels run under the same checker in every other
test of this directory (it is always on), so a race reintroduced in csrc/ fails those tests too."""

import re

import pytest
import torch
import ws1_kernels_ascend_emu as emu
from emu_cases import E, attention_inputs

PROBES = emu.hazard_probes()


def test_the_probe_set_has_failures_and_clean_runs():
    assert sum(1 for v in PROBES.values() if v) >= 10 and sum(1 for v in PROBES.values() if not v) >= 10


@pytest.mark.parametrize("name", sorted(PROBES))
def test_probe(name):
    expected = PROBES[name]
    if not expected:
        emu.hazard_probe(name)
        return
    with pytest.raises(RuntimeError, match=re.escape(expected)):
        emu.hazard_probe(name)


def _message(name):
    with pytest.raises(RuntimeError) as e:
        emu.hazard_probe(name)
    return str(e.value).splitlines()[0]


def test_missing_barrier_message_names_both_instructions_pipes_and_bytes():
    m = _message("copy_then_vector")
    assert "PIPE_V Adds (hazard_probes.h:" in m and "PIPE_MTE2 DataCopy GM->UB (hazard_probes.h:" in m, m
    assert "UB bytes [0x0, 0x400) of TBuf #0" in m and "kernel 'copy_then_vector'" in m, m


def test_legacy_loadf32_races_the_vector_unit():
    # git HEAD~'s LoadF32 (before the fix) in a dW-like loop: the next row's copy-in overwrites the tile that the
    # previous row's Muls / Add still use — the race of rms_norm_dw / qk_norm_dw (fp32 dy), embedding_bwd, and
    # attention's fp32 forward and backward; the fixed LoadF32 (probe loadf32_ok) runs clean
    m = _message("legacy_loadf32")
    assert "PIPE_MTE2 DataCopyPad GM->UB (hazard_probes.h:" in m and "PIPE_V Muls (hazard_probes.h:" in m, m
    assert "PIPE_V -> PIPE_MTE2" in m and "write after write" in m, m
    emu.hazard_probe("loadf32_ok")


def test_a_missing_cross_core_flag_names_both_cores():
    # a mixed (one AIC + two AIVs) block: the AIV reads the GM workspace the AIC's Fixpipe wrote without waiting for
    # its CrossCoreSetFlag; the corrected protocol runs clean (the probes' other plants: a set on the wrong pipe, a
    # slot overwritten before it was given back, a wait nobody answers — a deadlock —, a set nobody waits for)
    m = _message("mix_no_wait")
    assert (
        "AIV0 PIPE_MTE2 DataCopy GM->UB (hazard_probes.h:" in m
        and "AIC PIPE_FIX Fixpipe L0C->GM (hazard_probes.h:" in m
    ), m
    assert "(block 0, AIV0)" in m and "CrossCoreSetFlag/CrossCoreWaitFlag orders AIC PIPE_FIX -> AIV0 PIPE_MTE2" in m, m
    emu.hazard_probe("mix_ok")


def test_a_queue_orders_its_own_buffer_only():
    m = _message("queue_other_buffer")
    assert "TBuf #1" in m and "PIPE_MTE2 -> PIPE_V" in m, m
    emu.hazard_probe("queue_own_buffer_ok")


def test_dummy_tail_of_an_unpadded_copy_in():
    # DataCopyPad GM->UB of 5 floats with isPad = false: the other 3 floats of the 32-byte block are dummy data
    # (the emulator's NaN byte pattern), never zeros and never what UB held before
    out = emu.hazard_probe("dummy_tail_ok")
    assert torch.equal(out[:5], torch.full((5,), 1.5))
    assert torch.equal(out[5:8].view(torch.int32), torch.full((3,), -1, dtype=torch.int32))


def test_the_real_kernels_run_clean_at_the_sites_that_raced():
    # the sites of the V -> MTE2 race, fp32 paths included (each raised a hazard before the fix)
    # (attention's FP32 path is gone: its Q K^T and P V now run on the Cube with BF16 operands, and its
    # cross-core exchanges are checked by the mixed-kernel rules: test_the_mixed_kernels_run_clean below)
    x = torch.randn(4, 300)
    _, r = E.rms_norm(x, torch.ones(300), 1e-6)
    E.rms_norm_bwd(torch.randn(4, 300), x, torch.ones(300), r)
    xq = torch.randn(3, 2, 128).bfloat16()
    _, rq = E.qk_norm(xq, torch.ones(128).bfloat16(), 1e-6)
    E.qk_norm_bwd(torch.randn(3, 2, 128), xq, torch.ones(128).bfloat16(), rq)
    E.embedding_bwd(torch.randn(6, 300), torch.tensor([4, 1, 4, 0, 4, 2]), 7)


def test_the_mixed_kernels_run_clean_and_flags_pair():
    # attention forward and backward on one AIC + two AIVs per AI core: every GM byte of the per-core workspace is
    # ordered by the cross-core flags, every flag set is waited for; counted per launch
    q, k, v, cu, qp = attention_inputs([5, 150])
    emu.op_counts(reset=True)
    out, lse = E.attention(q, k, v, cu, cu, qp, 0.125)
    E.attention_bwd(out, q, k, v, out, lse, cu, cu, qp, 0.125)
    c = emu.op_counts(reset=True)
    for kernel in ("attention", "attention_bwd_dq", "attention_bwd_dkv"):
        assert c[kernel]["cross_flags"] > 0 and c[kernel]["mmad_macs"] > 0, (kernel, c[kernel])
