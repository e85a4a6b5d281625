"""The probe's head (bertkit/tasks/probe.py) against scikit-learn's solvers of the same regularised problems:
multinomial logistic regression (sklearn's C = 1 / (l2 N)) and ridge regression (alpha = l2 N / 2), on features
standardised as the probe standardises them. Features: a real encoder's would need a model; these problems are
convex, so random features with planted structure test the solver as well."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bertkit.tasks.probe import ProbeData, _fit, fit_linear_head


def _problem(seed: int, classes: int, n: int = 600, hidden: int = 24) -> tuple[torch.Tensor, torch.Tensor]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, hidden)) * rng.uniform(0.5, 3.0, size=hidden) + rng.normal(size=hidden)
    truth = rng.normal(size=(hidden, classes))
    logits = x @ truth + rng.gumbel(size=(n, classes)) * 3
    return torch.tensor(x, dtype=torch.float32), torch.tensor(logits.argmax(1))


@pytest.mark.parametrize("classes", [2, 5])
def test_softmax_head_is_sklearns_logistic_regression(classes: int) -> None:
    from sklearn.linear_model import LogisticRegression

    x, y = _problem(classes, classes)
    z = (x - x.mean(0)) / x.std(0, unbiased=False)
    l2 = 1e-2
    weight, bias, _ = _fit(z, y, "softmax", classes, l2)
    # two classes: sklearn fits one vector w = w1 - w0, and at our optimum w1 = -w0 = w/2, so our penalty on the
    # pair is half of l2/2 |w|^2
    c = (2 if classes == 2 else 1) / (l2 * len(z))
    reference = LogisticRegression(C=c, tol=1e-10, max_iter=10_000).fit(z.double().numpy(), y.numpy())
    ours = (z @ weight.T + bias).softmax(-1).numpy()
    # float32 L-BFGS, to its gradient tolerance
    np.testing.assert_allclose(ours, reference.predict_proba(z.double().numpy()), atol=1e-3)


def test_squared_head_is_sklearns_ridge() -> None:
    from sklearn.linear_model import Ridge

    x, _ = _problem(7, 1)
    scores = x[:, 0] * 2 - x[:, 3] + torch.randn(len(x), generator=torch.Generator().manual_seed(0))
    z = (x - x.mean(0)) / x.std(0, unbiased=False)
    l2 = 0.1
    weight, bias, _ = _fit(z, scores, "squared", 1, l2)
    reference = Ridge(alpha=l2 * len(z) / 2).fit(z.double().numpy(), scores.double().numpy())
    np.testing.assert_allclose(weight[0].numpy(), reference.coef_, atol=1e-4)
    assert float(bias) == pytest.approx(float(reference.intercept_), abs=1e-4)


def test_head_reads_raw_features_and_the_l2_is_chosen_on_held_out_loss() -> None:
    x, y = _problem(3, 3, n=800)
    head = fit_linear_head(ProbeData(x, y, "softmax", 3, None), seed=0)
    # the standardisation is folded in: the raw features through the head give the fitted probabilities
    z = (x - x.mean(0)) / x.std(0, unbiased=False)
    weight, bias, _ = _fit(z, y, "softmax", 3, head.report["l2"])
    ours, refit = (x @ head.weight.T + head.bias).softmax(-1), (z @ weight.T + bias).softmax(-1)
    np.testing.assert_allclose(ours.numpy(), refit.numpy(), atol=1e-3)  # the same optimum from two starts
    losses = head.report["held_out_loss"]
    assert len(losses) == 7 and head.report["l2"] == float(min(losses, key=losses.get))
    assert (x @ head.weight.T + head.bias).argmax(1).eq(y).float().mean() > 0.7  # it learned the planted rule
    # the same seed, the same head; the fit does not depend on a learning rate or on the order of the examples
    again = fit_linear_head(ProbeData(x, y, "softmax", 3, None), seed=0)
    assert torch.equal(again.weight, head.weight)
