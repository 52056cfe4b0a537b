"""Discrete VAE with 10-of-20 latents (sec. 5.1): I-MLE vs Identity under each projection.

A discrete variational auto-encoder on sklearn's bundled 8x8 digits (1797
images, binarised at half intensity; a fixed 80/20 split into training and
test images, and 15% of the training part held out for validation). The
encoder maps an image to logits theta over m = 20 latent variables of n = 20
states each; the latent code is a 10-hot sample per variable, y =
top-10(theta + eps) with eps ~ SoG(10, tau, s=10), the Sum-of-Gamma noise of
I-MLE, drawn by `cl.ComboLayer(cl.problems.TopK(n=20, k=10),
sample_noise=cl.SumOfGamma(...))` before the projection. The decoder
reconstructs the image from the 20x20 code. The loss is the paper's N-ELBO
(per-pixel binary cross-entropy plus the KL between the latent marginals and
the uniform distribution); the metric is the test N-ELBO with sampled codes
(lower is better).

I-MLE (its own SoG noise at the same tau; lambda, then its SoG temperature,
tuned on the validation N-ELBO over the first 2 seeds, `core.tune`; Identity's
temperature gets the same budget, tuned with P_std) is compared with Identity
under no projection, P_mean, P_norm, P_std and the detected P_auto, every row
over the same 10 seeds. A control row, Identity with P_std whose gradient is
zeroed after its first epoch, shows how far one epoch gets.

Sanity gate: a row trained when its validation N-ELBO drops by more than 5% of
its untrained value; a claim on a row that did not is invalid. Thresholds are
fractions of the spread from the untrained test N-ELBO to the best row's:
"clearly" and "much" need a lead above 0.02 of it, "far" above 0.06. Most of
that spread is what any decoder gains by learning the pixel frequencies without
using the code, so the fractions are small. CPU-scale changes: 8x8 digits
instead of MNIST, 12 epochs instead of 100, and the SoG temperature tau = 1
instead of 10 (with only 64 pixels to reconstruct, no method learned to use the
code at tau = 10). Architecture, k, m, n, s, optimiser, learning rate and batch
size are the paper's. MNIST runs with ``--set data=PATH`` (a folder torchvision
can read without downloading; ``--scale paper`` splits it as the paper does).
"""

from __future__ import annotations

import time

import numpy as np
import torch
from pydantic import Field
from torch import nn
from torch.nn import functional as F

import combolayer as cl

from . import core

NAME = "dvae"


class Config(core.ExperimentConfig):
    data: str = "digits"  # CPU scale: sklearn's 8x8 digits; or a folder with MNIST (torchvision)
    test_fraction: float = 0.2  # digits only; MNIST uses its own test split
    #: validation images, as a share of the training part (never the test split)
    val_fraction: float = Field(default=0.15, gt=0, lt=1)
    data_seed: int = 0  # the splits are fixed; seeds vary the model and the noise
    m: int = 20  # latent variables
    n: int = 20  # states per latent variable
    k: int = 10  # ones per latent variable
    sog_tau: float = 1.0  # SoG(k, tau, s) temperature; paper 10 (see the docstring)
    sog_s: int = 10  # SoG terms, paper
    #: I-MLE's target-distribution lambda, chosen on the validation split (first
    #: seed) from I-MLE's DVAE value, 10, and a factor of 10 either side
    imle_lambdas: list[float] = Field(default=[1.0, 10.0, 100.0], min_length=1)
    #: the SoG temperature, chosen the same way for I-MLE (at its chosen lambda) and
    #: for Identity (with P_std): this scale's 1 and a factor of 10 either side
    sog_taus: list[float] = Field(default=[0.1, 1.0, 10.0], min_length=1)
    epochs: int = 12  # paper: 100 (CPU budget: 70 runs at 10 seeds plus the tuning)
    batch_size: int = 100
    lr: float = 1e-3  # Adam, paper
    encoder: list[int] = [512, 256]  # paper: 784-512-256-(20x20)
    decoder: list[int] = [256, 512]  # paper: (20x20)-256-512-784
    projections: list[str] = ["none", "mean", "norm", "std", "auto"]
    #: "clearly lower", "much more": a lead above this fraction of the spread
    #: (untrained test N-ELBO -> best row's)
    clear_fraction: float = 0.02
    #: "far worse": a gap above this fraction of the same spread
    far_fraction: float = 0.06


#: Epochs, seeds and projections shrink; the model keeps its size (the paper's).
QUICK = {"epochs": 1, "seeds": [0, 1], "projections": ["none", "std"], "imle_lambdas": [10.0],
         "sog_taus": [1.0],
         "progress": False}

#: The paper's setup (app. "DVAE on MNIST"): 100 epochs, tau = 10, 50 000 training
#: and 10 000 validation images of MNIST's 60 000. MNIST itself needs
#: ``--set data=PATH``; without it this runs on the digits.
PAPER_SCALE = {"epochs": 100, "sog_tau": 10.0, "val_fraction": 1 / 6,
               "encoder": [512, 256], "decoder": [256, 512]}


#: How far the tuned grids may grow (`core.tune`): I-MLE's lambda around its DVAE
#: value, the SoG temperature around this scale's.
LAMBDA_BOUNDS = core.Bounds.around(10.0, "I-MLE's DVAE lambda")
TAU_BOUNDS = core.Bounds.around(1.0, "this scale's SoG temperature")


# -- data ------------------------------------------------------------------------------


def load_images(config: Config) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Binarised (train, validation, test) images, flattened, as float tensors on the
    config's device; the validation images are carved out of the training part."""
    rng = np.random.default_rng(config.data_seed)
    if config.data == "digits":
        images = (core.digits()[0] / 16.0 > 0.5).astype(np.float32)
        order = rng.permutation(len(images))
        n_test = int(round(config.test_fraction * len(images)))
        training, test = images[order[n_test:]], images[order[:n_test]]
    else:
        try:
            from torchvision.datasets import MNIST
        except ImportError:
            raise SystemExit(
                f"dvae: data={config.data!r} asks for MNIST, which needs torchvision; it is "
                "not installed here. Install torchvision or use the default data=digits."
            ) from None

        def split(train: bool) -> np.ndarray:
            raw = MNIST(config.data, train=train, download=False).data.numpy()
            return (raw.reshape(len(raw), -1) / 255.0 > 0.5).astype(np.float32)

        training, test = split(True), split(False)
    order = rng.permutation(len(training))
    n_val = int(round(config.val_fraction * len(training)))
    train, val = training[order[n_val:]], training[order[:n_val]]
    device = torch.device(config.device)
    return tuple(torch.from_numpy(part).to(device) for part in (train, val, test))


# -- model (app. "Discrete samplers": 512-256-20x20 and 256-512-784) -------------------


def mlp(sizes: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class DVAE(nn.Module):
    """Encoder to logits theta (m x n), a k-hot sample per latent variable, decoder to
    pixel logits."""

    def __init__(self, pixels: int, config: Config, sampler: cl.ComboLayer) -> None:
        super().__init__()
        self.m, self.n = config.m, config.n
        self.encoder = mlp([pixels, *config.encoder, config.m * config.n])
        self.decoder = mlp([config.m * config.n, *config.decoder, pixels])
        self.sampler = sampler

    def forward(self, x: torch.Tensor, timer: list[float] | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        theta = self.encoder(x).view(-1, self.m, self.n)
        start = time.perf_counter()
        code = self.sampler(theta) if self.training else self.sampler.sample(theta)
        if timer is not None:
            timer.append(time.perf_counter() - start)
        return theta, self.decoder(code.flatten(1))


def n_elbo(theta: torch.Tensor, pixel_logits: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Per-image N-ELBO: BCE summed over pixels + KL(softmax(theta) per variable || uniform)."""
    reconstruction = F.binary_cross_entropy_with_logits(pixel_logits, x, reduction="none").sum(-1)
    q = torch.softmax(theta, dim=-1)
    kl = (q * (torch.log(q + 1e-20) + np.log(theta.shape[-1]))).sum((-2, -1))
    return reconstruction + kl


# -- one run ----------------------------------------------------------------------------


def sampler_for(variant: core.Variant, config: Config, generator: torch.Generator) -> cl.ComboLayer:
    spec = cl.problems.TopK(n=config.n, k=config.k)
    tau = variant.options.get("tau", config.sog_tau)
    sog = cl.SumOfGamma(k=config.k, s=config.sog_s, tau=tau)
    if variant.method == "imle":
        # I-MLE draws its SoG(k, 1, s) noise itself and scales it by tau, in both solves.
        method = cl.IMLE(lam=variant.options["lam"], tau=tau, noise=cl.SumOfGamma(
            k=config.k, s=config.sog_s), generator=generator)
        return cl.ComboLayer(spec, method=method, projection="none")
    return cl.ComboLayer(spec, method="identity", projection=variant.projection,
                         sample_noise=sog, generator=generator)


def evaluate(model: DVAE, images: torch.Tensor, batch_size: int) -> float:
    model.eval()
    total = 0.0
    with torch.no_grad():
        for start in range(0, len(images), batch_size):
            x = images[start:start + batch_size]
            theta, logits = model(x)
            total += float(n_elbo(theta, logits, x).sum())
    model.train()
    return total / len(images)


def train_one(variant: core.Variant, seed: int, config: Config,
              data: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> core.Outcome:
    train, val, test = data
    device = torch.device(config.device)
    generator = torch.Generator().manual_seed(seed)  # the sampling noise
    order_rng = np.random.default_rng(seed)  # the minibatch order
    with core.seeded(seed):
        model = DVAE(train.shape[1], config, sampler_for(variant, config, generator)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    untrained = evaluate(model, test, config.batch_size)
    untrained_val = evaluate(model, val, config.batch_size)
    curve, train_curve, epoch_s, layer_s = [], [], [], []
    for epoch in range(config.epochs):
        if core.learns(variant, epoch):  # a control skips the training pass after epoch 1
            start, timer, losses = time.perf_counter(), [], []
            for batch in np.array_split(order_rng.permutation(len(train)),
                                        max(1, len(train) // config.batch_size)):
                x = train[torch.from_numpy(batch).to(device)]
                theta, logits = model(x, timer)
                loss = n_elbo(theta, logits, x).mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                losses.append(float(loss.detach()))
            epoch_s.append(time.perf_counter() - start)
            layer_s.append(sum(timer))
            train_curve.append(float(np.mean(losses)))
        curve.append(evaluate(model, test, config.batch_size))
    return core.Outcome(
        value=curve[-1], curve=curve, series={"train N-ELBO": train_curve},
        untrained_val=untrained_val, final_val=evaluate(model, val, config.batch_size),
        untrained=untrained,
        extras={"s_per_epoch": float(np.mean(epoch_s)),
                "solver_share": float(np.sum(layer_s) / np.sum(epoch_s)),
                "best_test_nelbo": float(min(curve))},
    )


# -- the comparison and the paper's claims ---------------------------------------------


def variants_for(config: Config, imle_lam: float | None = None, imle_tau: float | None = None,
                 identity_tau: float | None = None) -> dict[str, core.Variant]:
    """I-MLE (at ``imle_lam``, default: the grid's middle value), Identity under each
    projection (keyed by it), and the control; temperatures default to ``sog_tau``."""
    lam = config.imle_lambdas[len(config.imle_lambdas) // 2] if imle_lam is None else imle_lam
    found = {"imle": imle(lam, imle_tau or config.sog_tau)}
    found.update({p: identity(p, identity_tau or config.sog_tau) for p in config.projections})
    found["control"] = core.control(identity("std", identity_tau or config.sog_tau))
    return found


def imle(lam: float, tau: float) -> core.Variant:
    return core.Variant("imle", projection="none", options={"lam": lam, "tau": tau})


def identity(projection: str, tau: float) -> core.Variant:
    return core.Variant("identity", projection=projection, options={"tau": tau})


def claims_of(runs: core.Runs, config: Config, metric: core.Metric) -> list[core.Claim]:
    """The paper's claims (sec. 5.1 and app. "Additional Experimental Results") on the
    rows there are, with thresholds on the spread untrained -> best row."""
    rows = variants_for(config)
    clear_gap, clear_text = core.threshold(runs, metric, runs.variants, config.clear_fraction)
    far_gap, far_text = core.threshold(runs, metric, runs.variants, config.far_fraction)

    def better(text: str, a: str, b: str, min_gap: float = 0.0) -> core.Claim:
        # N-ELBO has no attainable ideal: the gate measures the room as |untrained|
        return core.claim_better(text, runs, rows[a], rows[b], metric, min_gap=min_gap,
                                 ideal=None)

    claims = []
    if "std" in rows:
        claims.append(better("Identity with P_std reaches a clearly lower N-ELBO than I-MLE "
                             f"(clearly: a lead above {clear_text})", "std", "imle", clear_gap))
    if {"none", "mean", "norm"} <= set(rows):
        claims += [
            better("Each projection helps: P_mean beats no projection", "mean", "none"),
            better("Each projection helps: P_norm beats no projection", "norm", "none"),
            better("P_norm helps much more than P_mean: P_norm beats P_mean "
                   f"(much: a lead above {clear_text})", "norm", "mean", clear_gap),
        ]
    if {"norm", "std"} <= set(rows):
        claims.append(better("Combined (P_std) they perform best: P_std beats P_norm",
                             "std", "norm"))
    if {"none", "std"} <= set(rows):
        claims.append(better(f"No projection is far worse than P_std (far: a gap above "
                             f"{far_text})", "std", "none", far_gap))
    return claims


def run(config: Config) -> core.Result:
    t0 = time.perf_counter()
    data = load_images(config)
    metric = core.Metric(name="N-ELBO", higher_is_better=False)

    def train(variant: core.Variant, seed: int, bar: object) -> core.Outcome:
        return train_one(variant, seed, config, data)

    lam = core.tune("imle", "lam", config.imle_lambdas,
                    lambda lam: imle(lam, config.sog_tau), train, config, metric,
                    bounds=LAMBDA_BOUNDS)
    imle_tau = core.tune("imle", "tau", config.sog_taus,
                         lambda tau: imle(lam["chosen"], tau), train, config, metric,
                         bounds=TAU_BOUNDS)
    identity_tau = core.tune("identity", "tau", config.sog_taus,
                             lambda tau: identity("std", tau), train, config, metric,
                             bounds=TAU_BOUNDS)
    tuning = [lam, imle_tau, identity_tau]
    rows = variants_for(config, lam["chosen"], imle_tau["chosen"], identity_tau["chosen"])
    runs = core.run_variants(list(rows.values()), config.seeds, train, desc=NAME,
                             progress=config.progress)
    claims = claims_of(runs, config, metric)
    return core.finish(NAME, config, metric, runs, paper=[], claims=claims, started=t0,
                       details={"tuning": tuning})
