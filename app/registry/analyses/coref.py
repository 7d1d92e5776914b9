"""``probe coref``: the best head at picking a pronoun's antecedent, beside the nearest-
mention and number-agreeing baselines (Clark et al. 2019, section 4.3)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from probe.errors import NotApplicable
from probe.app.registry import STREAMING, Analysis, Param, Result

if TYPE_CHECKING:
    from probe.app.registry import Context


def run(ctx: Context) -> Result:
    from probe.analyses.structure.coref_mentions import read_number
    from probe.analyses.structure.syntax_run import run_coref

    if not ctx.inputs.conllu:
        raise NotApplicable("coref needs a CorefUD treebank with Entity= in MISC: give --conllu (e.g. GUM)")
    p = ctx.params
    sentences = ctx.sentences
    numbers = read_number(ctx.inputs.conllu, limit=ctx.limit)
    # the windows stream through the model wherever the run's engine runs it (ctx.runner)
    result = run_coref(ctx.runner, sentences, numbers, context=p["context"], batch_size=p["batch_size"])
    model = ctx.model_name
    notes = [
        f"{r.setting:<17} head L{r.layer}H{r.head} {r.accuracy:.3f}  nearest {r.nearest_mention:.3f}  "
        f"nearest agreeing {r.nearest_agreeing:.3f}  ({r.count} pronouns)"
        for r in result.accuracy.best().itertuples()
    ]

    def write(d):
        from probe.app.report.syntax_figures import write_coref_report

        return list(
            write_coref_report(
                result, d, meta={"model": model, "conllu": str(ctx.inputs.conllu), "context": p["context"]}
            ).values()
        )

    return Result(notes=notes, writers=[write])


ANALYSIS = Analysis(
    "coref",
    "Coreference: the best head at finding a pronoun's antecedent",
    run,
    needs=("model", "treebank"),
    help="Best head at picking a pronoun's antecedent, beside the nearest-mention and number-agreeing "
    "baselines; writes coref.csv and coref_best.csv. Needs --conllu: a CorefUD treebank (Entity= in MISC).",
    params=(
        Param("context", int, 2, "preceding sentences of the same document in each window", min=0),
        Param("batch_size", int, 16, "examples per forward", min=1),
    ),
    order=11,
    engines=STREAMING,
    example="probe coref --conllu ../shared/data/ud-english-gum/en_gum-ud-dev.conllu --limit 40 --out out/coref",
)
