"""Card sections as plugins: each is registered with its template, its charts and the data it needs.

The card (``card.html.j2``) loops over :func:`ordered_sections`: the table of contents, then
each section as ``<section id=name><h2>title</h2>`` + its template. A section whose needed
key is missing renders its one ``missing`` line instead (or nothing at all when ``missing``
is None). A needed key is a dotted path into the card's data (results.json, checked, plus
the derived views of :mod:`reporter.card.data`); ``*`` matches any element of a list or map.

A section of one's own, with no other file edited::

    register_section(Section(name="toy", title="Toy", order=85, needs=("analysis.toy",),
                             source="<p>{{ card.analysis.toy }}</p>"))

>>> [s.name for s in ordered_sections()][:3]
['summary', 'leaderboard', 'tasks']
>>> has_key({"models": [{"lpp": None}, {"lpp": {"x": 1}}]}, "models.*.lpp")
True
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..registry import Registry


@dataclass(frozen=True)
class Section:
    """One section of the card."""

    name: str  # the anchor id and the registry key
    title: str  # the section heading
    template: str | None = None  # a template file shipped in reporter.template_files ...
    source: str | None = None  # ... or the Jinja source itself
    nav: str | None = None  # the table-of-contents label (default: the title)
    charts: tuple[str, ...] = ()  # chart names (reporter.card.charts.CHARTS) the section shows
    needs: tuple[str, ...] = ()  # dotted keys of the card's data the section cannot do without
    missing: str | None = ""  # the one line shown when a needed key is missing; None: leave the section out
    order: float = 100.0
    css_class: str = ""

    @property
    def template_name(self) -> str:
        """The name the Jinja loader resolves (a file, or ``section:<name>`` for inline source)."""
        if (self.template is None) == (self.source is None):
            raise ValueError(f"section '{self.name}': give exactly one of template and source")
        return self.template or f"section:{self.name}"

    def missing_line(self, card: dict[str, Any]) -> str | None:
        """None when every needed key is there; else the line to show (``""``: leave the section out)."""
        absent = [k for k in self.needs if not has_key(card, k)]
        if not absent:
            return None
        if self.missing is None:
            return ""
        why = (card.get("empty") or {}).get(self.name)  # the run's own reason (reporter.card.data.empty_elements)
        return why or self.missing or f"{self.title}: not measured in this run ({absent[0]} is missing from the results)."


def _plugin_section(name: str, obj: Any) -> Section:
    """An installed card section (entry-point group ``reporter.sections``): a :class:`Section` named like
    its entry point, with its Jinja ``source`` inline (a plugin ships no file into reporter's templates).

    >>> _plugin_section("toy", Section("toy", "Toy", source="<p>toy</p>")).title
    'Toy'
    >>> _plugin_section("toy", Section("toy", "Toy", template="toy.j2"))
    Traceback (most recent call last):
    ValueError: an installed section gives its template as source= (Jinja text), not template='toy.j2'
    """
    if not isinstance(obj, Section):
        raise TypeError(f"{obj!r} is not a reporter.card.sections.Section")
    if obj.name != name:
        raise ValueError(f"the entry point is named '{name}' but its section is named {obj.name!r}")
    if obj.source is None:
        raise ValueError(f"an installed section gives its template as source= (Jinja text), not template={obj.template!r}")
    return obj


#: card sections by name (installed ones, entry-point group ``reporter.sections``, after the built-in ones)
SECTIONS: Registry[Section] = Registry("card section", entry_point_group="reporter.sections", load=_plugin_section)


def register_section(section: Section) -> Section:
    """Register a section (a duplicate name is an error); returns it."""
    SECTIONS.add(section.name, section)
    return section


def ordered_sections() -> list[Section]:
    """Every registered section in card order."""
    return sorted((s for _, s in SECTIONS.items()), key=lambda s: s.order)


#: the filters the card's templates may use (``reporter.card.assets``, whose implementations need the analyse stage:
#: a template is compiled against these names, so ``validate`` loads no SciPy)
CARD_FILTERS = ("pct", "num", "pval", "p_is", "signed", "about", "source", "identity")


def template_problems() -> list[str]:
    """One line per registered section whose template would fail the card before a number is drawn: an inline
    template (a plugin's ``source=``) that does not compile (its syntax, a filter the card has not), or a
    ``template=`` file reporter does not ship. ``validate`` and ``run`` say so before a model loads (the card
    failed after every model had run).

    >>> template_problems()
    []
    """
    from importlib.resources import files

    import jinja2

    env = jinja2.Environment()
    env.filters.update({name: (lambda *a, **k: "") for name in CARD_FILTERS})
    out = []
    for s in ordered_sections():
        where = f"fix or remove what registers it ({SECTIONS.origin(s.name)})"
        if s.source is None:
            if s.template is None or not files("reporter.template_files").joinpath(s.template).is_file():
                out.append(f"card section '{s.name}': its template {s.template!r} is not a file reporter ships; give "
                           f"the template inline (source=), {where}")
            continue
        try:
            env.compile(s.source)
        except jinja2.TemplateSyntaxError as e:  # also an unknown filter (TemplateAssertionError)
            out.append(f"card section '{s.name}': its template does not compile (line {e.lineno}: {e.message}); "
                       f"{where}")
    return out


def check_templates() -> None:
    """Raise a :class:`~reporter.errors.UserError` with every line of :func:`template_problems`, if any (``validate``,
    and ``run`` before a card is drawn).
    """
    from ..errors import UserError

    if broken := template_problems():
        raise UserError(broken)


def _present(v: Any) -> bool:
    return v is not None and v != [] and v != {} and v != ""


def has_key(data: Any, path: str) -> bool:
    """Whether the dotted ``path`` leads to a present value (not None, not empty)."""
    head, _, rest = path.partition(".")
    if head == "*":
        values = data.values() if isinstance(data, dict) else data if isinstance(data, list) else []
        return any(has_key(v, rest) if rest else _present(v) for v in values)
    if not isinstance(data, dict) or not _present(data.get(head)):
        return False
    return has_key(data[head], rest) if rest else True


for _s in (
    Section("summary", "Summary", "summary.j2", order=10, css_class="summary"),
    Section("leaderboard", "Leaderboard", "leaderboard.j2", order=20),
    Section("tasks", "Per-task scores", "tasks.j2", nav="Tasks", charts=("task_scores",), order=30),
    Section("law", "Utility Law", "law.j2", charts=("law_pooled", "law_per_task"), order=40),
    Section("mui", "MUI per-layer profile", "mui.j2", nav="MUI profile", charts=("mui_layers",), order=50,
            needs=("models.*.tasks.*.mui_per_layer",), missing="Per-layer MUI: not measured in this run."),
    Section("sae", "MUI over SAE features", "sae.j2", nav="SAE features", order=55,
            needs=("models.*.tasks.*.mui_sae",), missing=None),
    Section("lpp", "LPP signature", "lpp.j2", nav="LPP", charts=("lpp_entropy", "lpp_pr_er"), order=60),
    Section("contamination", "Contamination", "contamination.j2", order=70, needs=("analysis.contamination",),
            charts=("contamination_items",),
            missing="Contamination checks: not run in this run."),
    Section("diversity", "Dataset diversity", "diversity.j2", nav="Diversity", charts=("overlap", "saturation"),
            order=80, needs=("analysis.diversity",), missing="Dataset diversity: not measured in this run."),
    Section("training", "Training phases", "training.j2", nav="Training", charts=("training",), order=90,
            needs=("analysis.training.model_series",), missing="Training phases: no checkpoint series in this run."),
    Section("measurements", "Other measurements", "measurements.j2", order=95, needs=("extra_measurements",),
            missing=None),
    Section("methods", "Methods and reproducibility", "methods.j2", nav="Methods", order=100),
    Section("appendix", "Appendix", "appendix.j2", order=110),
):
    register_section(_s)
