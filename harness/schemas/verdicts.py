"""A compare's verdicts: the variance components, one endpoint's verdict at a level, a stack's instability,
the delta's interval as the report shows it, and all a level concludes."""

from __future__ import annotations

from pydantic import BaseModel

from harness.schemas.window import Leveled

MARGIN = 0.05  # the default equivalence margin, a share (a profile's `equivalence_margin`)

class Components(BaseModel):
    """The variance components of a compare's pair differences (log units), with their degrees of freedom."""

    ms_pair: float  # mean square between pairs (pair means over levels, scaled by the level count)
    df_pair: float
    ms_res: float  # residual mean square (pairs x levels)
    df_res: float
    levels: int
    pairs: int
    # each level's variance of one pair's difference, over the pairs (ddof 1; pairs - 1 degrees of freedom): an
    # A/A's own per level, what a later compare pools in level by level ([] in one stored before it was kept)
    level_var: list[float] = []

    @property
    def variance(self) -> float:
        """Variance of one pair's difference at one level: sigma_u^2 + sigma_e^2."""
        return max(0.0, (self.ms_pair + (self.levels - 1) * self.ms_res) / self.levels)

    @property
    def df(self) -> float:
        """Satterthwaite's degrees of freedom of `variance`."""
        a, b = self.ms_pair / self.levels, (self.levels - 1) * self.ms_res / self.levels
        den = (a * a / self.df_pair if self.df_pair else 0.0) + (b * b / self.df_res if self.df_res else 0.0)
        return (a + b) ** 2 / den if den > 0 else 0.0

    def pooled(self, other: Components | None) -> Components:
        """These components with another compare's of the same noise (an A/A), weighted by degrees of freedom: the
        pair variance sigma_u^2 = (MS_pair - MS_res) / levels and the residual MS_res are pooled (so compares of
        different level counts pool alike), then MS_pair is rebuilt for this compare's level count."""
        if other is None:
            return self
        dp, dr = self.df_pair + other.df_pair, self.df_res + other.df_res
        ms_res = (self.df_res * self.ms_res + other.df_res * other.ms_res) / dr if dr else self.ms_res
        u = (self.df_pair * self.sigma_u2 + other.df_pair * other.sigma_u2) / dp if dp else self.sigma_u2
        return self.model_copy(update={"ms_pair": self.levels * u + ms_res, "ms_res": ms_res,
                                       "df_pair": dp, "df_res": dr})

    @property
    def sigma_u2(self) -> float:
        """The pair effect's variance (shared by a pair's levels), floored at 0."""
        return max(0.0, (self.ms_pair - self.ms_res) / self.levels)


class Verdict(BaseModel):
    """One endpoint at one level."""

    estimate: float | None  # the effect: a log ratio (throughput, TTFT) or a difference of shares (goodput)
    lo: float | None  # 95% interval (None: no interval)
    hi: float | None
    se: float | None
    df: float | None
    p: float | None
    p_holm: float | None = None
    mde: float | None = None  # the smallest effect this run could detect (80% power at its share of the 5%), same units
    verdict: str = "inconclusive"  # overhead | gain | equivalent | inconclusive
    pairs: int = 0
    note: str | None = None  # where the variance came from when not from the pairs alone, or why there is none


class Instability(BaseModel):
    baseline_spread_pct: float  # SD of the side's log tok/s windows about each level's mean, as a percent
    stack_spread_pct: float
    p: float  # Brown-Forsythe
    unstable: bool

    def text(self) -> str:
        return (f"the stack's windows spread ±{self.stack_spread_pct:.1f}% against the baseline's "
                f"±{self.baseline_spread_pct:.1f}% at the same levels (Brown-Forsythe p = {self.p:.3f})")


class DeltaInterval(BaseModel):
    delta_pct: float
    lo_pct: float
    hi_pct: float
    df: float | None  # the interval's degrees of freedom (Satterthwaite)
    n_baseline: int  # deployments of each side behind it
    n_stack: int
    source: str  # e.g. "4 deployment pairs"

    @property
    def half_width_pct(self) -> float:
        return (self.hi_pct - self.lo_pct) / 2

    def text(self) -> str:
        return f"{self.lo_pct:+.1f}…{self.hi_pct:+.1f}%"


class Routing(BaseModel):
    """Where one side's requests went at one level, from its engines' own counters over its windows: the prefix-cache
    hit rate over every engine, and each engine's requests and mean requests held (harness.analysis.replicas)."""

    replicas: int = 1
    hit_rate: float | None = None  # prefix-cache hits / queries (tokens), every engine, every window
    requests: list[float] = []  # per engine, summed over the windows
    in_engine: list[float | None] = []  # per engine: mean requests in it (running and waiting), over the windows
    imbalance: float | None = None  # requests: the busiest engine's over the mean (1.0: even)
    load_imbalance: float | None = None  # mean requests held: the same


class LevelDelta(Leveled):
    baseline_tok_s: float | None
    stack_tok_s: float | None
    delta_pct: float | None  # throughput: the order-balanced estimate over the pairs, as a percent
    ci: DeltaInterval | None  # throughput's 95% interval; None: not enough pairs (and no A/A of this profile)
    noise_pct: float | None  # the interval's half-width, for the plot's band
    # overhead | gain | mixed | equivalent | inconclusive: its significant endpoints; or why there is none:
    # host-bound | unchecked | client-bound | missing
    verdict: str
    endpoints: dict[str, Verdict] = {}  # throughput, goodput, ttft_p95
    why: str | None = None  # the endpoints behind an overhead/gain, or why the level has no verdict
    pairs: int = 0  # deployment pairs that measured the level on both sides
    invocations: list[int] = []  # which invocations measured this level (0: the first, n: the n-th resume)
    incomplete: list[str] = []  # windows stopped before their end, with why
    baseline_not_steady: list[str] = []  # one line per unsteady window, with its reasons
    stack_not_steady: list[str] = []
    baseline_modes: list[str] = []  # bimodal TTFT, per window where found
    stack_modes: list[str] = []
    baseline_ttft_p95_ms: float | None
    stack_ttft_p95_ms: float | None
    baseline_goodput: float | None
    stack_goodput: float | None
    baseline_good_rps: float | None
    stack_good_rps: float | None
    baseline_cpu_cores: dict[str, float]  # process label -> cores during the level
    stack_cpu_cores: dict[str, float]
    baseline_client_cores: float | None
    stack_client_cores: float | None
    baseline_e2e_p95_ms: float | None = None
    stack_e2e_p95_ms: float | None = None
    scheduled_rate: float | None = None  # open loop: the schedule's rate as drawn (both sides share a schedule)
    baseline_achieved_rate: float | None = None  # open loop: the rate the client actually sent at, req/s
    stack_achieved_rate: float | None = None
    baseline_gpu: dict[str, float | None] = {}  # gpu_means(): utilisation, memory, power, clocks over the windows
    stack_gpu: dict[str, float | None] = {}
    baseline_routing: Routing | None = None  # the prefix-cache hit rate, and per engine where a side has several
    stack_routing: Routing | None = None

    @property
    def judged(self) -> bool:
        return self.verdict in ("overhead", "gain", "mixed", "equivalent", "inconclusive")
