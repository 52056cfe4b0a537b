"""Globe TSP: learn where countries lie on a sphere from optimal tours through their flags.

Following the paper's section "Globe Traveling Salesman Problem" and its
appendix (after Vlastelica et al. 2020) on generated data, as the original
flags and capitals cannot be downloaded here. 100 "countries" are fixed points
on the unit sphere, each with a distinct synthetic 16x16 flag (stripes and a
symbol). An input is k flags; the label is the optimal tour through their
capitals under the chord distance, as a symmetric 0/1 adjacency matrix
(`cl.problems.TSP(k)`, exact by the library's Held-Karp DP).

`FlagEncoder`, the paper's network, maps each flag to a 3-D point on the
sphere; the pairwise distances of the k points are the TSP layer's costs and
the loss is the L1 distance between the predicted and the true adjacency. Adam,
batch size 50; 1,500 training, 500 test and 500 validation instances and 60
epochs at learning rate 3e-4, instead of 10,000 training instances and 100
epochs at 1e-4 (CPU scale; ``--scale paper`` sets the paper's sizes, k = 20).

Rows: Identity with P_std and Blackbox with its lambda chosen at k=5 on the
validation split around the paper's 20 (`core.tune`), both with margin noise
during the first half of training (``noise_schedule="step_off"``), as in the
paper: Blackbox at alpha=0.1, Identity at an alpha chosen the same way.
Settings at k=5: clean (``--set ks=[5,10]`` adds k=10, left out for time), and
the two robustness studies: gradient noise N(0, sigma^2) on each instance's
dL/dy (`cl.gradients.add_gradient_noise`, sigma = 0.25) and label corruption
(each adjacency entry flipped with probability rho / k, rho = 1). After each
clean pair, a control row: that Identity row with its gradient zeroed after the
first epoch.

The metric is the fraction of test instances whose predicted tour is the true
one; the fraction of true edges found, the seconds per epoch, the solver's
share of them and the cost norm are recorded too. Verdicts, over the same 4
seeds for every row: a sanity gate (validation accuracy closes 5% of the
distance from untrained to 1); thresholds as fractions of the setting's spread
from untrained to the best row ("on par" within 0.1 of it, counted only when
the control is detectably worse; "more robust" a lead above 0.1). At this
scale training is far from converged (1,800 steps against the paper's
20,000), so the clean comparison reflects how fast each method learns.
"""

from __future__ import annotations

import time

import numpy as np
import torch
from pydantic import Field
from torch import Tensor, nn
from torch.nn import functional as F

import combolayer as cl

from ..backends.timing import solver_clock
from . import verdicts
from .core import (
    GATE_MARGIN,
    Bounds,
    Claim,
    ExperimentConfig,
    Metric,
    Outcome,
    PaperNumber,
    Result,
    Runs,
    Variant,
    claim_better,
    claim_on_par,
    control,
    finish,
    learns,
    run_variants,
    seeded,
    threshold,
    tune,
)

NAME = "globe_tsp"
#: How far the tuned grids may grow (`core.tune`): around the paper's values.
LAMBDA_BOUNDS = Bounds.around(20.0, "the paper's Blackbox lambda")
NOISE_BOUNDS = Bounds.around(0.1, "the paper's margin noise")
METRIC = Metric(name="tour accuracy", higher_is_better=True)


class Config(ExperimentConfig):
    """The paper's values where they apply; the CPU-scale changes are named."""

    num_countries: int = 100  # paper: 100 flags
    flag_pixels: int = 16
    #: paper: 5, 10, 20; 10 and 20 do not fit the time budget (``--set ks=[5,10]``
    #: adds k=10; the run's seconds per epoch are in docs/results.md)
    ks: list[int] = [5]
    robust_k: int = 5  # paper: the studies are shown for k = 20
    #: paper: sigma on the x axis of its figure; 0.5 (its loss-curve figure) is left
    #: out of the CPU-scale default for time, and told the same story as 0.25 at 3 seeds
    grad_noise: list[float] = [0.25]
    label_rho: list[float] = [1.0]
    num_train: int = 1500  # paper: 10,000; CPU scale
    num_test: int = 500
    num_val: int = 500  # validation split: the sanity gate reads it, never the test split
    epochs: int = 60  # paper: 100; CPU scale
    lr: float = 3e-4  # paper: 1e-4 over 100 epochs of 200 steps; CPU scale
    batch_size: int = 50  # paper
    #: Blackbox's lambda for a mean loss at batch size 50, chosen at ``tune_k`` on the
    #: validation split (mean over 2 seeds, clean) starting from the paper's 20 and a
    #: factor of 10 either side, grown by `core.tune`; every k uses that choice
    bb_lams: list[float] = [2.0, 20.0, 200.0]
    #: Identity's margin noise gets the same budget: chosen the same way starting from
    #: the paper's 0.1 and a factor of 10 either side (Blackbox keeps ``noise``)
    identity_noises: list[float] = [0.01, 0.1, 1.0]
    paper_batch_size: int = 50
    #: the k at which both methods' hyperparameters are tuned, its choices used at
    #: every k (CPU budget: tuning at k=10 too does not fit it); None: per k
    tune_k: int | None = 5
    #: every row's seeds: 4, fixed for all rows (CPU budget: 20 minutes on 2 cores)
    seeds: list[int] = Field(default=[0, 1, 2, 3], min_length=1)
    noise: float = 0.1  # paper: xi in {0.1, 0.2, 0.5} for the first half of training
    world_seed: int = 0  # the countries and their flags
    data_seed: int = 1  # the training, test and validation instances
    #: "on par": a difference within this fraction of the spread untrained -> best row
    par_fraction: float = 0.1
    #: "more robust": a lead above this fraction of that setting's spread
    gap_fraction: float = 0.1
    #: sanity gate: a row trained when its validation accuracy closes this share of the
    #: distance from its untrained value to 1
    gate_margin: float = GATE_MARGIN


#: The seconds-long smoke run of the same code path.
#: 20 countries, so that a few hundred steps learn something.
QUICK = {"num_countries": 20, "num_train": 500, "num_test": 100, "num_val": 100, "epochs": 6,
         "bb_lams": [20.0], "identity_noises": [0.1], "tune_k": None,
         "seeds": [0], "ks": [5], "robust_k": 5, "grad_noise": [0.5], "label_rho": [1.0]}

#: The paper's setting: TSP(5), (10) and (20), the studies at k = 20 with sigma 0.25
#: and 0.5, 10,000 training instances, 100 epochs at learning rate 1e-4. The paper
#: states neither its test and validation sizes nor its flags' resolution: 1,000
#: instances each and the 16x16 flags are assumed. TSP(20) is solved by HiGHS here.
PAPER_SCALE = {"ks": [5, 10, 20], "robust_k": 20, "grad_noise": [0.25, 0.5],
               "num_train": 10_000, "num_test": 1_000, "num_val": 1_000, "epochs": 100,
               "lr": 1e-4}

PAPER = [
    PaperNumber(method="identity [k=5]", projection="std", value=0.9967,
                note="test accuracy, noise 0.1 for 50 of 100 epochs (appendix table)"),
    PaperNumber(method="identity [k=10]", projection="std", value=0.9972,
                note="same; Blackbox's clean accuracy is shown only in a figure"),
    PaperNumber(method="identity / blackbox [k=10]", projection="std", value=0.63,
                note="ratio of training times (53.1 / 84.6 min, runtime table)"),
]

#: Cost collapse: the cost norm falls by more than this fraction after the noise stops.
COLLAPSE = 0.25


# -- the world: countries on a sphere, and their flags --------------------------------


PALETTE = np.array([
    [0.85, 0.10, 0.10], [1.00, 1.00, 1.00], [0.05, 0.05, 0.05], [0.00, 0.25, 0.65],
    [0.00, 0.55, 0.25], [1.00, 0.80, 0.00], [0.95, 0.45, 0.05], [0.45, 0.75, 0.95],
    [0.50, 0.10, 0.35], [0.55, 0.35, 0.15],
])


def _flag(design: tuple, pixels: int) -> np.ndarray:
    """Render one flag ``(pixels, pixels, 3)`` from its design tuple."""
    layout, stripes, colours, symbol, symbol_colour = design
    r, c = np.meshgrid(np.arange(pixels) + 0.5, np.arange(pixels) + 0.5, indexing="ij")
    u, v = r / pixels, c / pixels
    if layout == "horizontal":
        band = np.minimum((u * stripes).astype(int), stripes - 1)
    elif layout == "vertical":
        band = np.minimum((v * stripes).astype(int), stripes - 1)
    elif layout == "diagonal":
        band = np.minimum(((u + v) / 2 * stripes).astype(int), stripes - 1)
    else:  # a cross in the second colour on the first
        band = ((np.abs(u - 0.5) < 0.12) | (np.abs(v - 0.38) < 0.12)).astype(int)
    image = PALETTE[np.asarray(colours)[band]]
    du, dv = u - 0.5, v - 0.5
    shape = {"none": np.zeros_like(u, dtype=bool),
             "disc": du**2 + dv**2 < 0.2**2,
             "square": (np.abs(du) < 0.17) & (np.abs(dv) < 0.17),
             "diamond": np.abs(du) + np.abs(dv) < 0.24,
             "plus": ((np.abs(du) < 0.06) & (np.abs(dv) < 0.25))
             | ((np.abs(dv) < 0.06) & (np.abs(du) < 0.25))}[symbol]
    image[shape] = PALETTE[symbol_colour]
    return image


def make_world(config: Config) -> tuple[Tensor, Tensor]:
    """``(points (n, 3) on the unit sphere, flags (n, 3, P, P))``, fixed by ``world_seed``."""
    rng = np.random.default_rng(config.world_seed)
    points = rng.normal(size=(config.num_countries, 3))
    points /= np.linalg.norm(points, axis=1, keepdims=True)
    designs: set[tuple] = set()
    flags = []
    while len(flags) < config.num_countries:
        layout = str(rng.choice(["horizontal", "vertical", "diagonal", "cross"]))
        stripes = 2 if layout == "cross" else int(rng.integers(2, 5))
        colours = [int(rng.integers(len(PALETTE)))]
        while len(colours) < stripes:
            colour = int(rng.integers(len(PALETTE)))
            if colour != colours[-1]:
                colours.append(colour)
        symbol = str(rng.choice(["none", "disc", "square", "diamond", "plus"]))
        symbol_colour = int(rng.integers(len(PALETTE))) if symbol != "none" else 0
        design = (layout, stripes, tuple(colours), symbol, symbol_colour)
        if design in designs:
            continue
        designs.add(design)
        flags.append(_flag(design, config.flag_pixels))
    flags = np.stack(flags).transpose(0, 3, 1, 2)
    return torch.from_numpy(points), torch.from_numpy(flags.astype(np.float32))


def chord_distances(points: Tensor) -> Tensor:
    """Pairwise Euclidean distances of points on the unit sphere, ``(..., k, k)``; the
    clamp keeps the gradient finite on the diagonal (which no tour uses)."""
    gram = points @ points.transpose(-1, -2)
    return (2.0 - 2.0 * gram).clamp_min(1e-9).sqrt()


def make_instances(points: Tensor, k: int, count: int, rng: np.random.Generator,
                   solver) -> tuple[Tensor, Tensor]:
    """``(country indices (count, k), optimal tours (count, k, k))``."""
    index = np.stack([rng.choice(len(points), size=k, replace=False) for _ in range(count)])
    index = torch.from_numpy(index)
    tours = solver.solve(chord_distances(points[index]))
    return index, tours


def corrupt(tours: Tensor, rho: float, rng: np.random.Generator) -> Tensor:
    """Flip every entry above the diagonal with probability ``rho / k``, mirrored."""
    k = tours.shape[-1]
    flips = np.triu(rng.random(tours.shape) < rho / k, k=1)
    flips = torch.from_numpy(flips | flips.transpose(0, 2, 1))
    return torch.where(flips, 1.0 - tours, tours)


# -- model ---------------------------------------------------------------------------


class FlagEncoder(nn.Module):
    """The paper's network: 2 conv layers ((20, 4, 2), (50, 4, 2)) and a fully
    connected layer of 500, to one 3-D point per flag on the unit sphere."""

    def __init__(self, pixels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 20, 4, stride=2)
        self.conv2 = nn.Conv2d(20, 50, 4, stride=2)
        side = ((pixels - 4) // 2 + 1 - 4) // 2 + 1
        self.fc = nn.Linear(50 * side * side, 500)
        self.out = nn.Linear(500, 3)

    def forward(self, flags: Tensor) -> Tensor:
        x = F.relu(self.conv2(F.relu(self.conv1(flags))))
        x = self.out(F.relu(self.fc(x.flatten(1))))
        return F.normalize(x, dim=-1)


# -- variants and one training run ------------------------------------------------------


def variants(config: Config, bb_lams: dict[int, float] | None = None,
             identity_noises: dict[int, float] | None = None) -> list[Variant]:
    """Identity and Blackbox per setting; after each clean pair, the control:
    that Identity row with its gradient zeroed after the first epoch. Blackbox at
    ``bb_lams[k]``, Identity at margin noise ``identity_noises[k]`` (defaults: the
    paper's lambda and ``noise``)."""
    middle = config.bb_lams[len(config.bb_lams) // 2]
    settings = [(k, 0.0, 0.0) for k in config.ks]
    settings += [(config.robust_k, sigma, 0.0) for sigma in config.grad_noise]
    settings += [(config.robust_k, 0.0, rho) for rho in config.label_rho]
    rows = []
    for k, sigma, rho in settings:
        setting = f"k={k}" + (f", grad noise {sigma:g}" if sigma else "") + (
            f", labels rho={rho:g}" if rho else "")
        rows.append(identity_or_blackbox(config, "identity", k, sigma, rho, setting,
                                         noise=(identity_noises or {}).get(k, config.noise)))
        rows.append(identity_or_blackbox(config, "blackbox", k, sigma, rho, setting,
                                         (bb_lams or {}).get(k, middle)))
        if not sigma and not rho:  # the clean settings' "on par" claims need the control
            rows.append(control(rows[-2]))
    return rows


def identity_or_blackbox(config: Config, name: str, k: int, sigma: float = 0.0,
                         rho: float = 0.0, setting: str = "", bb_lam: float | None = None,
                         noise: float | None = None) -> Variant:
    """Identity with P_std, or Blackbox at ``bb_lam`` (the paper's lambda for a mean
    loss at its batch size; per instance: divided by it), with the margin noise
    (default: ``config.noise``)."""
    if name == "identity":
        projection, method = "std", "identity"
    else:
        projection, method = "none", {"name": "blackbox", "reduction": "mean",
                                      "lam": bb_lam / config.paper_batch_size}
    return Variant(name, projection, config.noise if noise is None else noise, setting=setting,
                   options={"method": method, "k": k, "sigma": sigma, "rho": rho})


def train_one(config: Config, world: dict, variant: Variant, seed: int, bar=None) -> Outcome:
    k, sigma, rho = variant.options["k"], variant.options["sigma"], variant.options["rho"]
    data = world[k]
    device = torch.device(config.device)
    generator = torch.Generator().manual_seed(seed)
    with seeded(seed):
        model = FlagEncoder(config.flag_pixels).to(device)
    switch_off = config.epochs // 2
    layer = cl.ComboLayer(cl.problems.TSP(num_nodes=k), method=variant.options["method"],
                          projection=variant.projection, noise=variant.noise,
                          noise_schedule={"name": "step_off", "until": switch_off},
                          generator=generator)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    flags = world["flags"].to(device)
    index, tours = data["train_index"], data["train_tours"]
    if rho:
        tours = corrupt(tours, rho, np.random.default_rng([config.data_seed, seed, 7]))
    untrained = evaluate(model, layer, flags, data, "test")["accuracy"]
    untrained_val = evaluate(model, layer, flags, data, "val")["accuracy"]
    curve, norms, losses = [], [], []
    train_s = solver_s = 0.0
    with solver_clock(layer) as timer:
        for epoch in range(config.epochs):
            if not learns(variant, epoch):
                # a control past its first epoch: the model is frozen, so its costs
                # and test accuracy are those of the last epoch (no loss is measured)
                norms.append(norms[-1])
                curve.append(curve[-1])
                continue
            layer.set_epoch(epoch)
            start, solver_start = time.perf_counter(), timer.seconds
            model.train()
            layer.train()
            order = torch.randperm(len(index), generator=generator)
            norm_sum = loss_sum = 0.0
            for begin in range(0, len(order), config.batch_size):
                batch = order[begin:begin + config.batch_size]
                w = chord_distances(model(flags)[index[batch].to(device)])
                y = layer(w)
                y = cl.gradients.add_gradient_noise(y, sigma, generator=generator, instance_dims=2)
                loss = (y - tours[batch].to(y)).abs().sum((-2, -1)).mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                norm_sum += float(torch.linalg.vector_norm(w.detach(), dim=(-2, -1)).sum())
                loss_sum += float(loss.detach()) * len(batch)
            train_s += time.perf_counter() - start
            solver_s += timer.seconds - solver_start
            norms.append(norm_sum / len(index))
            losses.append(loss_sum / len(index))
            curve.append(evaluate(model, layer, flags, data, "test")["accuracy"])
            if bar is not None:
                bar.set_postfix_str(f"seed {seed}: {variant.label}, epoch {epoch + 1}")
    final = evaluate(model, layer, flags, data, "test")
    return Outcome(value=final["accuracy"], curve=curve, train_s=train_s, untrained=untrained,
                   untrained_val=untrained_val,
                   final_val=evaluate(model, layer, flags, data, "val")["accuracy"], extras={
        "edge accuracy": final["edges"],
        "untrained tour accuracy": untrained,
        "s / epoch": train_s / len(losses),  # per epoch that trained
        "solver share of training": solver_s / train_s,
        "cost norm after / before noise off": norms[-1] / norms[max(0, switch_off - 1)],
    }, series={"cost norm ||w||": norms, "train loss": losses})


@torch.no_grad()
def evaluate(model: nn.Module, layer: cl.ComboLayer, flags: Tensor, data: dict,
             split: str) -> dict:
    """Tour accuracy and the fraction of true edges found on ``split`` ("test" or "val")."""
    model.eval()
    layer.eval()
    points = model(flags)
    y = layer(chord_distances(points[data[f"{split}_index"].to(flags.device)])).cpu()
    truth = data[f"{split}_tours"].to(y)
    k = truth.shape[-1]
    return {"accuracy": float((y == truth).all(-1).all(-1).double().mean()),
            "edges": float((y * truth).sum((-2, -1)).mean() / (2 * k))}


def make_world_data(config: Config) -> dict:
    points, flags = make_world(config)
    world: dict = {"flags": flags, "points": points}
    rng = np.random.default_rng(config.data_seed)
    for k in sorted({*config.ks, config.robust_k}):
        solver = cl.make_solver(cl.problems.TSP(num_nodes=k))
        data = {}
        # validation last, so the training and test instances stay those of earlier runs
        for split, count in (("train", config.num_train), ("test", config.num_test),
                             ("val", config.num_val)):
            data[f"{split}_index"], data[f"{split}_tours"] = make_instances(
                points, k, count, rng, solver)
        world[k] = data
    return world


def run(config: Config) -> Result:
    started = time.perf_counter()
    world = make_world_data(config)

    def train(variant: Variant, seed: int, bar) -> Outcome:
        return train_one(config, world, variant, seed, bar)

    every_k = sorted({*config.ks, config.robust_k})
    tuned_at = every_k if config.tune_k is None else [config.tune_k]
    tuning = {k: tune("blackbox", "lam (mean loss, batch 50)", config.bb_lams,
                      lambda lam, k=k: identity_or_blackbox(config, "blackbox", k, bb_lam=lam),
                      train, config, METRIC, bounds=LAMBDA_BOUNDS, setting=f"k={k}")
              for k in tuned_at}
    noises = {k: tune("identity", "margin noise", config.identity_noises,
                      lambda noise, k=k: identity_or_blackbox(config, "identity", k, noise=noise),
                      train, config, METRIC, bounds=NOISE_BOUNDS, setting=f"k={k}")
              for k in tuned_at}

    def chosen(records: dict[int, dict]) -> dict[int, float]:  # a k not tuned: tune_k's
        return {k: records.get(k, records[tuned_at[0]])["chosen"] for k in every_k}

    rows = variants(config, chosen(tuning), chosen(noises))
    runs = run_variants(rows, config.seeds, train, desc=NAME,
                        progress=config.progress)
    found = claims(config, runs)
    return finish(NAME, config, METRIC, runs, PAPER, found, started, details={
        "solver": {str(k): cl.make_solver(cl.problems.TSP(num_nodes=k)).backend
                   for k in sorted({*config.ks, config.robust_k})},
        "tuning": [*tuning.values(), *noises.values()]})


# -- the paper's claims ----------------------------------------------------------------


def claims(config: Config, runs: Runs) -> list[Claim]:
    """The paper's claims on ``runs``: Identity on par with Blackbox when clean (per k),
    more robust under gradient noise and label corruption, no cost collapse, faster.
    Thresholds are fractions of the spread untrained -> best row of the setting."""
    def pick(method: str, k: int, sigma: float = 0.0, rho: float = 0.0,
             is_control: bool = False) -> Variant:
        for v in runs.variants:
            o = v.options
            if (v.method == method and v.is_control == is_control
                    and (o["k"], o["sigma"], o["rho"]) == (k, sigma, rho)):
                return v
        raise KeyError(f"no {method} row at k={k}, sigma={sigma:g}, rho={rho:g}")

    gated = {"gate_margin": config.gate_margin, "ideal": 1.0}
    found = []
    for k in config.ks:
        identity, blackbox = pick("identity", k), pick("blackbox", k)
        tolerance, text = threshold(runs, METRIC, (identity, blackbox), config.par_fraction)
        found.append(claim_on_par(
            f"Identity is on par with Blackbox when clean (k={k}; tolerance {text})", runs,
            identity, blackbox, METRIC, tolerance, control=pick("identity", k, is_control=True),
            **gated))
    r = config.robust_k
    studies = [(f"gradient noise sigma={sigma:g}", sigma, 0.0) for sigma in config.grad_noise]
    studies += [(f"label corruption rho={rho:g}", 0.0, rho) for rho in config.label_rho]
    for name, sigma, rho in studies:
        identity, blackbox = pick("identity", r, sigma, rho), pick("blackbox", r, sigma, rho)
        gap, text = threshold(runs, METRIC, (identity, blackbox), config.gap_fraction)
        found.append(claim_better(
            f"Identity is more robust than Blackbox under {name} (k={r}; gap needed: {text})",
            runs, identity, blackbox, METRIC, min_gap=gap, **gated))
    sigma = 0.25 if 0.25 in config.grad_noise else (config.grad_noise or [0.0])[0]
    found.append(_collapse_claim(config, runs, pick("identity", r, sigma),
                                 pick("blackbox", r, sigma), sigma, r))
    k = max(config.ks)
    found.append(_speed_claim(config, runs, pick("identity", k), pick("blackbox", k), k))
    return found


def _collapse_claim(config: Config, runs: Runs, identity: Variant, blackbox: Variant,
                    sigma: float, k: int) -> Claim:
    """Gated on Identity only: the claim predicts that Blackbox fails (its costs
    shrink to nothing), so Blackbox not training is its subject, not a flaw."""
    key = "cost norm after / before noise off"
    bb, ident = runs.extra(blackbox, key), runs.extra(identity, key)
    falls, falls_evidence = verdicts.better(bb, 1.0, higher_is_better=False, min_gap=COLLAPSE)
    holds, holds_evidence = verdicts.better(ident, bb, higher_is_better=True)
    verdict, evidence = verdicts.gate(
        (verdicts.all_of([falls, holds]),
         f"‖w‖ at the end / when the noise stops: blackbox {np.mean(bb):.3g}, "
         f"identity {np.mean(ident):.3g}; blackbox's fall below 1: {falls_evidence} "
         f"({falls}); identity above blackbox: {holds_evidence} ({holds})"),
        {identity.label: runs.gate(identity, METRIC, config.gate_margin, 1.0)})
    return Claim(
        claim=f"Blackbox's costs collapse once the noise is switched off, Identity's do not "
              f"(gradient noise sigma={sigma:g}, k={k})",
        verdict=verdict, evidence=evidence)


def _speed_claim(config: Config, runs: Runs, identity: Variant, blackbox: Variant,
                 k: int) -> Claim:
    key = "s / epoch"
    ident, bb = runs.extra(identity, key), runs.extra(blackbox, key)
    verdict, evidence = verdicts.gate(
        verdicts.better(ident, bb, higher_is_better=False),
        {v.label: runs.gate(v, METRIC, config.gate_margin, 1.0) for v in (identity, blackbox)})
    return Claim(
        claim=f"Identity trains faster than Blackbox, which solves twice per step "
              f"(k={k}; paper: time ratio 0.63 at k=10)",
        verdict=verdict,
        evidence=f"s / epoch identity {np.mean(ident):.3g}, blackbox {np.mean(bb):.3g}, "
                 f"ratio {np.mean(ident) / np.mean(bb):.2f}: {evidence}")
