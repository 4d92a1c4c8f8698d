"""How good `run.py bisect` is, on generated launches (tests/benchmark/bisect_validation.py): seeded, smaller runs of
the docs' table, at the bisect workflow's own budget and probe cost. A 64-commit range with one commit making the
step 5% slower at step CV 2%: the right commit named within 7 probes in at least 90% of bisects, a wrong one named
as decided in at most 5%, never more node time than the budget; with no slowdown in the range, nothing named."""

from __future__ import annotations

import pytest
from tests.benchmark.bisect_validation import bisect_rates, workflow_budget_minutes, workflow_probe_cost
from tests.benchmark.paired_check_validation import wilson


@pytest.fixture(scope="module")
def workflow():
    return workflow_probe_cost(), workflow_budget_minutes() * 60


def test_a_5pct_slowdown_in_64_commits_is_named_within_7_probes_and_the_budget(workflow):
    cost, budget_s = workflow
    rates = bisect_rates(1, 300, cost=cost, budget_s=budget_s, cv=0.02)
    assert wilson(rates.named_right_within, rates.trials)[0] >= 0.90, rates
    assert rates.named_wrong <= 0.02 and wilson(rates.named_wrong, rates.trials)[1] <= 0.05, rates
    assert rates.spent_max_min * 60 <= budget_s, rates


def test_a_range_without_a_slowdown_names_nothing(workflow):
    cost, budget_s = workflow
    rates = bisect_rates(2, 300, cost=cost, budget_s=budget_s, cv=0.02, gap=1.0)
    assert rates.named_right == 0.0 and wilson(rates.named_wrong, rates.trials)[1] <= 0.05, rates
    assert rates.not_reproduced >= 0.95, rates
