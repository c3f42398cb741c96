"""Words for a verdict: one paragraph fit for a chat message, and a readable text report."""
from __future__ import annotations

import math
import re
import textwrap
from typing import List, Optional

from fleet_rollout.judge.core import FAIL, INCONCLUSIVE, Verdict
from fleet_rollout.judge.guards import HostResult


def per_million(rate: Optional[float]) -> str:
    if rate is None:
        return "n/a"
    value = rate * 1e6
    if value == 0:
        return "0"
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def _ratio(value: float) -> str:
    if math.isinf(value):
        return "unbounded" if value > 0 else "0"
    return f"{value:.2f}x"


def _p(value: float) -> str:
    return f"{value:.2g}" if value >= 0.001 else f"{value:.1e}"


def _ci(verdict: Verdict) -> str:
    test = verdict.test
    assert test is not None
    low, high = test.ci_ratio
    if math.isinf(test.ci_low) or math.isinf(test.ci_high):
        return f"{test.ci_level:.0%} CI unbounded: too few hosts or too few drops"
    return f"{test.ci_level:.0%} CI {_ratio(low)} to {_ratio(high)}"


def _medians(verdict: Verdict) -> str:
    canary, control = verdict.summary["canary"], verdict.summary["control"]
    return (f"Median drops per million packets: canary {per_million(canary['median_rate_pre'])} "
            f"before and {per_million(canary['median_rate_post'])} after, control "
            f"{per_million(control['median_rate_pre'])} before and "
            f"{per_million(control['median_rate_post'])} after.")


_STRATA = {"site+model": "site and hardware model", "site": "site", "model": "hardware model"}


def _test_clause(verdict: Verdict) -> str:
    test = verdict.test
    assert test is not None
    within = "" if test.strata == "none" else f" within {_STRATA[test.strata]}"
    return (f"{_ratio(test.ratio)} relative to the control hosts{within} ({_ci(verdict)}; "
            f"permutation p = {_p(test.p_value)}, {test.n_canary} canary vs {test.n_control} "
            "control hosts)")


def _measure(verdict: Verdict) -> str:
    """What the estimate is of: the drop rate, or where the change showed more in it than in
    how often hosts drop, the drops per dropping step."""
    test = verdict.test
    if test is not None and test.measure == "size":
        return "drops per dropping step"
    return "drop rate"


def explain(verdict: Verdict) -> str:
    """One paragraph: the verdict, the numbers behind it and what follows."""
    where = ""
    if verdict.rollout is not None:
        where = f" ({verdict.rollout}" + (f", batch {verdict.batch}" if verdict.batch is not None
                                          else "") + ")"
    test = verdict.test
    if verdict.reason == "ceiling":
        text = f"FAIL{where}: {_breaches(verdict)}"
        text += (" The ceiling fails a batch at once; the comparison with the control hosts "
                 "alone would not have.")
        if test is not None:
            text += (f" For reference, the canaries' {_measure(verdict)} changed "
                     f"{_test_clause(verdict)}.")
        return text
    second = f" Second reason: {_breaches(verdict)}" if verdict.ceiling_breaches else ""
    if verdict.large is not None:
        return _large(verdict, where) + second
    return _by_comparison(verdict, where) + second


def _breaches(verdict: Verdict) -> str:
    """The canary hosts above the absolute ceiling, worst first (one sentence)."""
    worst = verdict.ceiling_breaches[0]
    others = len(verdict.ceiling_breaches) - 1
    text = (f"canary host {worst.host} dropped {worst.rate_post:.3%} of its received packets "
            f"after the change ({worst.drops_post:.0f} of {worst.packets_post:.0f}; before: "
            f"{'n/a' if worst.rate_pre is None else f'{worst.rate_pre:.3%}'}), above the "
            f"absolute ceiling of {verdict.policy.max_drop_rate:.3%}")
    return text + (f"; {others} more canary host{'s' if others > 1 else ''} above it too."
                   if others else ".")


def _by_comparison(verdict: Verdict, where: str) -> str:
    """A verdict of the guards or of the comparison with the control hosts."""
    policy = verdict.policy
    test = verdict.test
    if verdict.verdict == INCONCLUSIVE:
        reasons = "; ".join(g.message for g in verdict.failed_guards)
        text = f"INCONCLUSIVE{where}: the judge cannot decide this batch: {reasons}."
        if test is not None:
            text += (f" For reference only, the usable hosts show a change of "
                     f"{_test_clause(verdict)}.")
        text += (" A human has to decide: extend the soak, fix the data collection, or approve "
                 "or roll back by hand.")
        return text
    assert test is not None
    if verdict.verdict == FAIL:
        thin = ""
        if verdict.failed_guards:
            thin = (" Not every host had usable data ("
                    + "; ".join(g.message for g in verdict.failed_guards)
                    + "), but the usable ones show the regression.")
        return (f"FAIL{where}: after the change the canaries' {_measure(verdict)} rose "
                f"{_test_clause(verdict)}; {test.canary_above_control_median} of "
                f"{test.n_canary} canaries changed more than the median control host. "
                f"{_medians(verdict)} The regression is significant (p < {policy.alpha:g}) and "
                f"at least the {policy.min_regression_ratio:g}x the policy counts, so the batch "
                f"should not go on.{thin}")
    if verdict.reason == "small_regression":
        return (f"PASS{where}: the canaries' {_measure(verdict)} changed "
                f"{_test_clause(verdict)}. The rise "
                f"is significant but below the {policy.min_regression_ratio:g}x the policy "
                f"counts as a regression. {_medians(verdict)}")
    bound = ""
    if not math.isinf(test.ci_high) and test.ci_ratio[1] < 1.0:
        bound = (f" An improvement: {1 / test.ratio:.1f}x fewer drops than the controls would "
                 f"predict (at least {1 / test.ci_ratio[1]:.2f}x at this confidence).")
    elif not math.isinf(test.ci_high):
        bound = (f" At this confidence the data rule out a rise above "
                 f"{_ratio(test.ci_ratio[1])}.")
    return (f"PASS{where}: no drop regression: the canaries' {_measure(verdict)} changed "
            f"{_test_clause(verdict)}. {_medians(verdict)}{bound}")


def _large(verdict: Verdict, where: str) -> str:
    """A small batch decided by a large change (large_change.py)."""
    large = verdict.large
    assert large is not None
    hosts = "; ".join(
        f"{h['host']} {_ratio(h['ratio'])} ({h['z']:.1f} sd"
        + (f", median post step {_ratio(h['step_ratio'])} its pre mean" if h["step_ratio"]
           is not None else "") + ")" for h in large.hosts)
    few = (f"{len(large.hosts)} usable canar{'y' if len(large.hosts) == 1 else 'ies'}, fewer "
           f"than the {verdict.policy.min_canary_hosts} the comparison needs")
    if verdict.verdict == FAIL:
        return (f"FAIL{where}: a large regression: with {few}, the drop rate rose "
                f"{_ratio(large.ratio)} relative to the control hosts ({hosts}); a change of "
                f"{large.threshold:g}x or more in every canary decides on its own. "
                f"{_medians(verdict)} The batch should not go on.")
    return (f"PASS{where}: a large improvement: with {few}, the drop rate fell to "
            f"{_ratio(large.ratio)} of the control hosts' ({1 / large.ratio:.1f}x fewer drops; "
            f"{hosts}); a change of {large.threshold:g}x or more in every canary decides on its "
            f"own. {_medians(verdict)}")


_NUMERIC = re.compile(r"^[-+]?[\d.,]+(e[-+]?\d+)?[x%]?$|^-$|^n/a$")


def _table(rows: List[List[str]], header: List[str]) -> List[str]:
    """Columns whose cells are all numbers are right-aligned, the others left-aligned."""
    columns = list(zip(header, *rows))
    widths = [max(len(str(x)) for x in column) for column in columns]
    numeric = [bool(rows) and all(_NUMERIC.match(str(x)) for x in column[1:])
               for column in columns]

    def line(values: List[str]) -> str:
        return "  ".join(str(v).rjust(w) if num else str(v).ljust(w)
                         for v, w, num in zip(values, widths, numeric))

    return [line(header), "  ".join("-" * w for w in widths)] + [line(row) for row in rows]


def _host_rows(hosts: List[HostResult]) -> List[List[str]]:
    rows = []
    for h in hosts:
        rows.append([
            h.host,
            "yes" if h.usable else "no",
            "-" if h.drops_pre is None else f"{h.drops_pre:.0f}",
            "-" if h.packets_pre is None else f"{h.packets_pre:.0f}",
            per_million(h.rate_pre),
            "-" if h.drops_post is None else f"{h.drops_post:.0f}",
            "-" if h.packets_post is None else f"{h.packets_post:.0f}",
            per_million(h.rate_post),
            "-" if h.e is None else f"{h.e:+.2f}",
            h.reason or "",
        ])
    return rows


def render_text(verdict: Verdict, all_hosts: bool = False, width: int = 100) -> str:
    """The CLI's readable report."""
    out: List[str] = [f"Verdict: {verdict.verdict} ({verdict.reason})", ""]
    out += textwrap.wrap(verdict.explanation, width)
    out.append("")
    test = verdict.test
    if test is not None:
        out.append("Test (per-host e = change of ln drop rate, canary vs control):")
        ci = "unbounded" if math.isinf(test.ci_low) or math.isinf(test.ci_high) else (
            f"{_ratio(test.ci_ratio[0])} .. {_ratio(test.ci_ratio[1])}")
        rows = [
            ["hosts used", f"{test.n_canary} canary, {test.n_control} control"],
            ["compared within", test.strata if test.strata != "none" else "whole batch"],
            ["weighted statistic T", f"{test.u:.4g}"],
            ["one-sided p", f"{_p(test.p_value)} (alpha {verdict.policy.alpha:g}; "
             + (f"{test.permutations} random relabellings)" if test.permutations
                else "normal approximation)")],
            ["weighted ratio", _ratio(test.ratio)],
            [f"{test.ci_level:.0%} CI", ci],
            ["noise: host spread tau / over-dispersion phi", f"{test.tau:.3f} / {test.phi:.2f}"],
            ["counted", f"bursts (mean size {test.burst_size:.1f} drops)"
             if test.burst_size > 1 else "drops"],
            ["ratio of", _measure(verdict)],
            ["pre window", f"{test.pre_windows:g} x the post window"],
            ["median e canary / control",
             f"{test.canary_median_e:+.3f} / {test.control_median_e:+.3f}"],
        ]
        out += ["  " + line for line in _table(rows, ["statistic", "value"])]
        out.append("")
    out.append("Guards:")
    rows = [[g.name, "ok" if g.ok else "FAILED", g.message] for g in verdict.guards]
    out += ["  " + line for line in _table(rows, ["guard", "state", "detail"])]
    out.append(f"  ceiling: {verdict.policy.max_drop_rate:.3%} per canary host, "
               f"{len(verdict.ceiling_breaches)} breach(es)")
    out.append("")
    header = ["host", "used", "drops pre", "packets pre", "per M", "drops post",
              "packets post", "per M", "e", "note"]
    canary = [h for h in verdict.hosts if h.group == "canary"]
    out.append("Canary hosts (per M = drops per million packets):")
    out += ["  " + line for line in _table(_host_rows(canary), header)]
    control = [h for h in verdict.hosts if h.group == "control"]
    if all_hosts:
        out.append("")
        out.append("Control hosts:")
        out += ["  " + line for line in _table(_host_rows(control), header)]
    else:
        unused = [h for h in control if not h.usable]
        out.append("")
        out.append(f"Control hosts: {len(control)} listed, {len(control) - len(unused)} used "
                   "(--all-hosts lists them)")
        for h in unused[:10]:
            out.append(f"  not used: {h.host}: {h.reason}")
    return "\n".join(line.rstrip() for line in out) + "\n"
