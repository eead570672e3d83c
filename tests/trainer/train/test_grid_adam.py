"""GridAdam: non-lazy groups are torch Adam bit for bit; lazy groups leave zero-gradient elements alone.

The Triton kernel is held to its torch twin in Triton's interpreter (a fresh subprocess, since
TRITON_INTERPRET is read when the kernel is defined) and on CUDA where there is one. Inputs are
fresh random draws; the seed is in the messages (``NGPTUNE_TEST_SEED`` replays a run).
"""

from __future__ import annotations

import copy
import inspect
import io
import json
import math
import sys

import pytest
import torch

from tests.support.triton_worker import observe_in_interpreter, random_seed
from trainer.train.grid_adam import GridAdam, lazy_adam_torch
from trainer.train.triton_grid_adam import lazy_adam_triton
from trainer.triton_support import INTERPRET

BETAS = (0.9, 0.99)
SHAPES = ((7, 3), (33,), (2, 5, 4))
SIZES = (1, 1000, 4097)
HAS_DECOUPLED = "decoupled_weight_decay" in inspect.signature(torch.optim.Adam).parameters
# (grad dtype, where the step count lives, weight decay, GradScaler tensors) of the kernel cases
KERNEL_CASES = (("float32", "host", 0.0, None), ("float32", "device", 0.01, None),
                ("float16", "host", 0.0, "scaled"), ("bfloat16", "device", 0.0, "found_inf"))


def _params(seed: int, shapes=SHAPES) -> list[torch.nn.Parameter]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(shape, generator=generator)) for shape in shapes]


def _grads(generator: torch.Generator, params, zero_fraction: float = 0.0) -> list[torch.Tensor]:
    """One step's gradients: normal draws (no exact zeros), a ``zero_fraction`` of them zeroed."""
    grads = []
    for p in params:
        g = torch.randn(p.shape, generator=generator)
        g[g == 0] = 1.0
        g[torch.rand(p.shape, generator=generator) < zero_fraction] = 0.0
        grads.append(g)
    return grads


def _step(opt: torch.optim.Optimizer, params, grads) -> None:
    for p, g in zip(params, grads):
        p.grad = None if g is None else g.clone()
    opt.step()


def _copies(params) -> list[torch.nn.Parameter]:
    return [torch.nn.Parameter(p.detach().clone()) for p in params]


def _snapshot(opt: torch.optim.Optimizer, params) -> list[dict[str, torch.Tensor]]:
    """Each parameter's value and state tensors, cloned."""
    return [{"param": p.detach().clone(), **{k: v.clone() for k, v in opt.state[p].items()}} for p in params]


def _moved_fraction(new: torch.Tensor, old: torch.Tensor, hit: torch.Tensor) -> float:
    """Fraction of the ``hit`` elements that changed (1 when none is hit); an update smaller than
    half an ulp of its value rounds away, so a handful of unmoved elements is no failure."""
    return float((new[hit] != old[hit]).float().mean()) if hit.any() else 1.0


def _assert_same(ours: list[dict], theirs: list[dict], seed: int) -> None:
    for i, (a, b) in enumerate(zip(ours, theirs)):
        assert a.keys() == b.keys(), f"seed {seed}: parameter {i}: state keys {sorted(a)} vs {sorted(b)}"
        for key in a:
            assert a[key].dtype == b[key].dtype and a[key].device == b[key].device, f"seed {seed}: {i}.{key}"
            assert torch.equal(a[key], b[key]), (
                f"seed {seed}: parameter {i}, {key}: max diff {(a[key] - b[key]).abs().max().item()}")


# ---------------------------------------------------------------------------------- non-lazy groups

ADAM_OPTIONS = [{}, {"foreach": True}, {"fused": True}, {"amsgrad": True, "maximize": True, "weight_decay": 0.05}]
if HAS_DECOUPLED:
    ADAM_OPTIONS.append({"decoupled_weight_decay": True, "weight_decay": 0.05})


@pytest.mark.parametrize("options", ADAM_OPTIONS, ids=lambda o: ",".join(o) or "default")
def test_non_lazy_groups_are_bitwise_torch_adam(options):
    seed = random_seed()
    ours, theirs = _params(seed), _params(seed)
    grid = torch.nn.Parameter(torch.zeros(50))  # a lazy group beside them must not change their update
    lazy_group = {"params": [grid], "lazy": True, "amsgrad": False, "maximize": False}
    if HAS_DECOUPLED:
        lazy_group["decoupled_weight_decay"] = False
    opt = GridAdam([{"params": ours[:2]}, {"params": ours[2:], "lr": 3e-3}, lazy_group], lr=1e-2, betas=BETAS,
                   **options)
    ref = torch.optim.Adam([{"params": theirs[:2]}, {"params": theirs[2:], "lr": 3e-3}], lr=1e-2, betas=BETAS,
                           **options)
    generator = torch.Generator().manual_seed(seed)
    for t in range(5):
        grads = _grads(generator, ours)
        if t == 2:
            grads[1] = None  # skipped by both
        grid.grad = torch.ones(50)
        _step(opt, ours, grads)
        _step(ref, theirs, grads)
        _assert_same(_snapshot(opt, ours), _snapshot(ref, theirs), seed)


# ------------------------------------------------------------------------------------- lazy groups

@pytest.mark.parametrize("options", [{}, {"fused": True}, {"weight_decay": 0.05}],
                         ids=lambda o: ",".join(o) or "default")
def test_lazy_group_with_dense_gradients_is_torch_adam(options):
    seed = random_seed()
    ours, theirs = _params(seed), _params(seed)
    opt = GridAdam(ours, lr=1e-2, betas=BETAS, lazy=True, lazy_backend="torch", **options)
    ref = torch.optim.Adam(theirs, lr=1e-2, betas=BETAS, **options)
    generator = torch.Generator().manual_seed(seed)
    for _ in range(5):
        grads = _grads(generator, ours)
        _step(opt, ours, grads)
        _step(ref, theirs, grads)
    for i, (a, b) in enumerate(zip(_snapshot(opt, ours), _snapshot(ref, theirs))):
        assert a.keys() == b.keys() and torch.equal(a["step"], b["step"]), f"seed {seed}: parameter {i}"
        assert a["step"].dtype == b["step"].dtype and a["step"].device == b["step"].device
        for key in ("param", "exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(a[key], b[key], rtol=1e-6, atol=1e-7,
                                       msg=lambda m: f"seed {seed}: {i}.{key}: {m}")


def test_zero_gradient_elements_keep_value_and_moments_and_a_hit_uses_the_global_step():
    seed = random_seed()
    lr, (beta1, beta2), eps = 0.1, BETAS, 1e-8
    p = torch.nn.Parameter(torch.randn(64, generator=torch.Generator().manual_seed(seed)))
    opt = GridAdam([p], lr=lr, betas=BETAS, eps=eps, lazy=True, lazy_backend="torch")
    generator = torch.Generator().manual_seed(seed + 1)
    hits = {1: 0.5, 5: -0.25}  # element 0 is hit at steps 1 and 5 only
    p0 = float(p.detach()[0])
    before = {"param": p.detach().clone(), "exp_avg": torch.zeros(64), "exp_avg_sq": torch.zeros(64)}
    for t in range(1, 7):
        (g,) = _grads(generator, [p], zero_fraction=0.7)
        g[0] = hits.get(t, 0.0)
        _step(opt, [p], [g])
        after = _snapshot(opt, [p])[0]
        zero = g == 0
        for key in ("param", "exp_avg", "exp_avg_sq"):
            where = f"seed {seed}: step {t}: {key}"
            assert torch.equal(after[key][zero], before[key][zero]), f"{where}: an element without gradient moved"
            moved = _moved_fraction(after[key], before[key], ~zero)
            assert moved > 0.9, f"{where}: only {moved:.0%} of the elements with a gradient moved"
        before = after
    assert float(opt.state[p]["step"]) == 6.0
    # by hand, in float64: t = 1, then t = 5 (one global count; tcnn's per-element count would be 2)
    m1, v1 = (1 - beta1) * 0.5, (1 - beta2) * 0.5**2
    p1 = p0 - lr / (1 - beta1) * m1 / (math.sqrt(v1) / math.sqrt(1 - beta2) + eps)
    m5, v5 = beta1 * m1 + (1 - beta1) * -0.25, beta2 * v1 + (1 - beta2) * 0.25**2
    p5 = p1 - lr / (1 - beta1**5) * m5 / (math.sqrt(v5) / math.sqrt(1 - beta2**5) + eps)
    state = opt.state[p]
    for name, got, want in (("param", float(p.detach()[0]), p5), ("exp_avg", float(state["exp_avg"][0]), m5),
                            ("exp_avg_sq", float(state["exp_avg_sq"][0]), v5)):
        assert math.isclose(got, want, rel_tol=2e-6), f"seed {seed}: {name}: {got} vs {want} by hand"


# ---------------------------------------------------------------------------------- Triton kernel

def _kernel_inputs(generator: torch.Generator, n: int, grad_dtype: str, device: str):
    param = torch.randn(n, generator=generator)
    exp_avg = 0.1 * torch.randn(n, generator=generator)
    exp_avg_sq = 0.01 * torch.rand(n, generator=generator)
    (grad,) = _grads(generator, [param], zero_fraction=0.7)
    grad = grad.to(getattr(torch, grad_dtype))
    return [x.to(device) for x in (param, grad, exp_avg, exp_avg_sq)]


def _normwise_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a − b| / max |b|: the two differ by a rounding of the step size (an ulp here and there),
    which elementwise is large where an update nearly cancels the value."""
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30)) if a.numel() else 0.0


def observe(device: str, seed: int) -> list[dict]:
    """Kernel against twin: single calls on odd sizes, then GridAdam over 3 steps per backend."""
    generator = torch.Generator().manual_seed(seed)
    seen = []
    for n in SIZES:
        for grad_dtype, step_at, weight_decay, amp in KERNEL_CASES:
            param, grad, exp_avg, exp_avg_sq = _kernel_inputs(generator, n, grad_dtype, device)
            step = torch.tensor(7.0, device=device) if step_at == "device" else 7.0
            extra = {"grad_scale": torch.tensor(1024.0, device=device) if amp else None,
                     "found_inf": torch.tensor(float(amp == "found_inf"), device=device) if amp else None}
            if amp:
                grad = grad * 1024
            fast, slow = [[x.clone() for x in (param, exp_avg, exp_avg_sq)] for _ in range(2)]
            for update, (p, m, v) in ((lazy_adam_triton, fast), (lazy_adam_torch, slow)):
                update(p, grad, m, v, step, lr=1e-2, beta1=BETAS[0], beta2=BETAS[1], eps=1e-15,
                       weight_decay=weight_decay, **extra)
            kept = (grad == 0) | (amp == "found_inf")
            seen.append({"case": f"n={n} {grad_dtype} step on {step_at} wd={weight_decay} {amp}", "seed": seed,
                         "diff": max(_normwise_diff(a, b) for a, b in zip(fast, slow)),
                         "kept": all(torch.equal(a[kept], b[kept]) for a, b in zip(fast, (param, exp_avg, exp_avg_sq))),
                         "moved": _moved_fraction(fast[0], param, ~kept)})
    for fused in (False, True):  # step on the CPU (read on the host on CUDA), then on the device
        params = {backend: _params(seed, shapes=((4097,), (3, 11))) for backend in ("triton", "torch")}
        params = {backend: [p.to(device).detach().requires_grad_() for p in ps] for backend, ps in params.items()}
        opts = {backend: GridAdam(ps, lr=1e-2, betas=BETAS, lazy=True, lazy_backend=backend, fused=fused)
                for backend, ps in params.items()}
        for _ in range(3):
            grads = [g.to(device) for g in _grads(generator, params["torch"], zero_fraction=0.7)]
            for backend, opt in opts.items():
                _step(opt, params[backend], grads)
        fast, slow = (_snapshot(opts[b], params[b]) for b in ("triton", "torch"))
        seen.append({"case": f"GridAdam fused={fused}", "seed": seed, "kept": True, "moved": 1.0,
                     "diff": max(_normwise_diff(a[k], b[k]) for a, b in zip(fast, slow) for k in a)})
    try:
        lazy_adam_triton(*(x.double() for x in _kernel_inputs(generator, 5, "float32", device)), 1.0,
                         lr=1e-2, beta1=0.9, beta2=0.99, eps=1e-8)
        seen.append({"case": "float64 parameter", "seed": seed, "raised": None})
    except ValueError as exc:
        seen.append({"case": "float64 parameter", "seed": seed, "raised": str(exc)})
    return seen


def _check(seen: list[dict]) -> None:
    *updates, float64 = seen
    assert len(updates) == len(SIZES) * len(KERNEL_CASES) + 2
    for r in updates:
        assert r["kept"], f"seed {r['seed']}: {r['case']}: an element with zero gradient (or a skipped step) changed"
        assert r["moved"] > 0.99, f"seed {r['seed']}: {r['case']}: only {r['moved']:.1%} of the hit parameters moved"
        assert r["diff"] <= 5e-7, f"seed {r['seed']}: {r['case']}: max |triton − torch| / max |torch| = {r['diff']}"
    assert float64["raised"] and "param" in float64["raised"] and "float32" in float64["raised"], float64


def test_triton_kernel_matches_the_torch_twin_in_the_interpreter():
    _check(observe_in_interpreter(__file__, random_seed()))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_triton_kernel_matches_the_torch_twin_on_cuda():
    _check(observe("cuda", random_seed()))


@pytest.mark.skipif(INTERPRET, reason="TRITON_INTERPRET=1 lets the kernel take CPU tensors")
def test_triton_backend_refuses_cpu_tensors_without_the_interpreter():
    p = torch.nn.Parameter(torch.zeros(3))
    p.grad = torch.ones(3)
    with pytest.raises(ValueError, match="lazy_backend='torch'"):
        GridAdam([p], lazy=True, lazy_backend="triton").step()


# ----------------------------------------------------------------------------- state and scaling

def _groups(params) -> list[dict]:
    return [{"params": params[:1], "lazy": True}, {"params": params[1:], "weight_decay": 0.01}]


def test_state_dict_round_trip_continues_identically():
    seed = random_seed()
    params = _params(seed)
    opt = GridAdam(_groups(params), lr=1e-2, betas=BETAS)
    generator = torch.Generator().manual_seed(seed)
    grads = [_grads(generator, params, zero_fraction=0.7) for _ in range(5)]
    for g in grads[:3]:
        _step(opt, params, g)
    buffer = io.BytesIO()
    torch.save(opt.state_dict(), buffer)  # as the checkpoint code writes and reads it
    buffer.seek(0)
    resumed_params = _copies(params)
    resumed = GridAdam(_groups(resumed_params), lr=1e-2, betas=BETAS)
    resumed.load_state_dict(torch.load(buffer, weights_only=True))
    assert [g["lazy"] for g in resumed.param_groups] == [True, False]
    for g in grads[3:]:
        _step(opt, params, g)
        _step(resumed, resumed_params, g)
    ours = _snapshot(opt, params)
    assert all(set(s) == {"param", "step", "exp_avg", "exp_avg_sq"} for s in ours)
    _assert_same(_snapshot(resumed, resumed_params), ours, seed)


def test_a_loaded_state_keeps_this_optimizers_betas_eps_and_weight_decay():
    """A resumed run trains with its own config's hyper-parameters; the moments and steps are the saved ones."""
    seed = random_seed()
    params = _params(seed)
    saved = GridAdam([{"params": [params[0]], "lazy": True, "weight_decay": 0.0},
                      {"params": [params[1]], "lazy": False, "weight_decay": 1e-6}], lr=1e-2, betas=BETAS, eps=1e-15)
    _step(saved, params, _grads(torch.Generator().manual_seed(seed), params))
    state = copy.deepcopy(saved.state_dict())
    copies = _copies(params)
    resumed = GridAdam([{"params": [copies[0]], "lazy": True, "weight_decay": 0.0},
                        {"params": [copies[1]], "lazy": False, "weight_decay": 0.0}], lr=1e-3, betas=(0.8, 0.9), eps=1e-8)
    resumed.load_state_dict(state)
    assert [(g["betas"], g["eps"], g["weight_decay"]) for g in resumed.param_groups] == [((0.8, 0.9), 1e-8, 0.0)] * 2
    assert [g["lr"] for g in resumed.param_groups] == [1e-2, 1e-2]  # the schedule sets it every step
    for a, b in zip(saved.state_dict()["state"].values(), resumed.state_dict()["state"].values()):
        assert all(torch.equal(a[k], b[k]) for k in a), f"seed {seed}"


@pytest.mark.parametrize("fused", [False, True])
def test_state_layout_is_torch_adams_and_its_checkpoints_load_both_ways(fused):
    seed = random_seed()
    ours, theirs = _params(seed), _params(seed)
    opt = GridAdam(_groups(ours), lr=1e-2, betas=BETAS, fused=fused)
    ref = torch.optim.Adam(_groups(theirs), lr=1e-2, betas=BETAS, fused=fused)
    grads = _grads(torch.Generator().manual_seed(seed), ours)
    _step(opt, ours, grads)
    _step(ref, theirs, grads)
    def layout(snapshot: dict) -> dict:
        return {k: (v.dtype, v.device, v.shape) for k, v in snapshot.items()}

    for a, b in zip(_snapshot(opt, ours), _snapshot(ref, theirs)):
        assert layout(a) == layout(b), f"seed {seed}"
    opt.load_state_dict(copy.deepcopy(ref.state_dict()))  # torch Adam's groups have no "lazy": ours stay
    assert [g["lazy"] for g in opt.param_groups] == [True, False]
    ref.load_state_dict(copy.deepcopy(opt.state_dict()))
    for a, b in zip(ref.state_dict()["state"].values(), opt.state_dict()["state"].values()):
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), f"seed {seed}"


@pytest.mark.skipif(not hasattr(torch.amp, "GradScaler"),
                    reason=f"torch {torch.__version__} has no torch.amp.GradScaler (a CPU one needs torch >= 2.3)")
@pytest.mark.parametrize("fused", [False, True], ids=["scaler-unscales", "optimizer-unscales"])
def test_grad_scaler_step_unscales_and_an_inf_gradient_skips_the_step(fused):
    seed = random_seed()
    generator = torch.Generator().manual_seed(seed)
    scaled, plain = _params(seed, shapes=((40,), (5,))), _params(seed, shapes=((40,), (5,)))
    opt = GridAdam(_groups(scaled), lr=1e-2, betas=BETAS, fused=fused)
    ref = GridAdam(_groups(plain), lr=1e-2, betas=BETAS, fused=fused)
    assert getattr(opt, "_step_supports_amp_scaling", False) == fused
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    for _ in range(3):
        weights = _grads(generator, scaled, zero_fraction=0.7)  # d loss / d p = weights
        scaler.scale(sum((p * w).sum() for p, w in zip(scaled, weights))).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
        _step(ref, plain, weights)
    _assert_same(_snapshot(opt, scaled), _snapshot(ref, plain), seed)
    before, scale_before = _snapshot(opt, scaled), scaler.get_scale()
    weights = _grads(generator, scaled, zero_fraction=0.7)
    weights[0][3] = math.inf
    scaler.scale(sum((p * w).sum() for p, w in zip(scaled, weights))).backward()
    scaler.step(opt)
    scaler.update()
    assert scaler.get_scale() < scale_before
    _assert_same(_snapshot(opt, scaled), before, seed)  # values, moments and step counts


# ------------------------------------------------------------------------------------ validation

LAZY_REJECTS = [{"amsgrad": True}, {"maximize": True}, {"differentiable": True}]
if HAS_DECOUPLED:
    LAZY_REJECTS.append({"decoupled_weight_decay": True})


@pytest.mark.parametrize("option", LAZY_REJECTS, ids=lambda o: next(iter(o)))
def test_a_lazy_group_rejects_options_it_cannot_honour_naming_the_group(option):
    (key,) = option
    a, b, c = _params(0)
    with pytest.raises(ValueError, match=rf"param_groups\[1\]\.{key}"):
        GridAdam([{"params": [a]}, {"params": [b], "lazy": True, **option}])
    with pytest.raises(ValueError, match=rf"param_groups\[0\]\.{key}"):
        GridAdam([a], lazy=True, **option)
    opt = GridAdam([{"params": [a]}, {"params": [b]}])
    with pytest.raises(ValueError, match=rf"param_groups\[2\]\.{key}"):
        opt.add_param_group({"params": [c], "lazy": True, **option})


def test_other_bad_options_are_named():
    a, b, _ = _params(0)
    with pytest.raises(ValueError, match=r"param_groups\[1\]\.lazy: expected a bool, got 'yes'"):
        GridAdam([{"params": [a]}, {"params": [b], "lazy": "yes"}])
    with pytest.raises(ValueError, match=r"lazy_backend: expected one of .*, got 'cuda'"):
        GridAdam([a], lazy_backend="cuda")
    opt = GridAdam([{"params": [a]}, {"params": [b], "lazy": True}])
    saved = opt.state_dict()
    saved["param_groups"][1]["amsgrad"] = True
    with pytest.raises(ValueError, match=r"param_groups\[1\]\.amsgrad"):
        opt.load_state_dict(saved)


if __name__ == "__main__":
    print(json.dumps(observe("cpu", int(sys.argv[1]))))
