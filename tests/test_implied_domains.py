"""Implied domains (rules/domains.py): a sum of a factor that is 0 outside its domain reduces
over that domain only — exactly, in the program, so the model, the limit and the C skip the
empty tiles alike."""
from __future__ import annotations

import autocomp_jupyter as autocomp
from autocomp_jupyter.dsl import parse
from autocomp_jupyter.interp import equivalent
from autocomp_jupyter.rules.domains import implied_domains
from autocomp_jupyter.verify import _replayed

CAUSAL_SUM = """input S: f32[4, 24, 24]
E[h, s, t] = exp(S[h, s, t]) where t <= s
Z[h, s] += E[h, s, t]
W[h, s] += E[h, s, t] * E[h, s, t]
output Z, W
"""


def test_a_sum_of_a_causal_factor_takes_its_domain_and_computes_the_same():
    program = parse(CAUSAL_SUM, "<t>")
    rewritten, changed = implied_domains(program)
    z = next(st for st in rewritten.statements if st.target == "Z")
    assert z.domain and z.points == 4 * 24 * 25 // 2
    # E read twice in one product: not a single factor, left alone
    assert not next(st for st in rewritten.statements if st.target == "W").domain
    assert equivalent(program, rewritten)
    assert rewritten.rewrites[-1][0] == "implied_domains"
    assert _replayed(program, "implied_domains", tuple(changed)) is not None    # a scaled twin replays it


def test_nothing_is_implied_without_a_domain_or_for_a_max():
    assert isinstance(implied_domains(parse(CAUSAL_SUM.replace(" where t <= s", ""), "<t>")), str)
    assert isinstance(implied_domains(parse(CAUSAL_SUM.replace("Z[h, s] +=", "Z[h, s] max=")
                                            .replace("W[h, s] += E[h, s, t] * E[h, s, t]\n", "")
                                            .replace("output Z, W", "output Z"), "<t>")), str)


def test_the_fusion_pass_applies_it_and_the_plan_verifies():
    res = autocomp.optimize(parse(CAUSAL_SUM, "<t>"), target="npu", tune=0)
    entries = [e for e in res.report["rules"] if e["rule"] == "implied_domain"]
    assert entries and entries[0]["applied"], entries
    assert res.report["verified"]
