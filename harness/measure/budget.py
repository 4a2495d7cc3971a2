"""A sequential compare's clock: what each deployment took (its start, its judged windows, its profiled windows,
its teardown), what the next pair will take, and where the profiled windows go so that they never cost the verdict
a pair.

The next pair is predicted side by side: each side's warm start where it has had one (its first start is cold: the
engine compiles, and Ray starts its cluster; on the 2-core host Ray's first start took 92 s and bare vLLM's 70 s,
their later ones far less), its last judged sweep, and its teardown; never the profiled windows, which run once.

Where the profiled windows go (docs/concepts.md, "Profiled windows"), once per side:
- a pair's first deployment, from the minimum design's last pair on, when they push no pair out of the budget (it
  holds as many further pairs, up to max_pairs, with them as without them) and fit in it themselves;
- else the deployment that is still up when the compare stops (the look is taken after its judged windows,
  before its teardown), when the budget holds them;
- else, for a side still unprofiled, a short pass of its own (one more warm deployment, profiled windows only),
  when the budget holds it.
A compare that stopped undecided is diagnosed by the same rule."""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.schemas.compare import DeploymentTime

SIDES = ("baseline", "stack")
MIN_PAIRS = 2  # an interval of the pair effect needs two pairs, one in each order, so that a drift cancels


@dataclass
class SideTimes:
    """One side's seconds, as known before the compare (from evidence) or as it measured them."""

    cold_s: float
    warm_s: float | None  # None: no warm start measured; the cold one stands in
    judged_s: float  # warm-up sweep and judged windows, ready to done
    profiled_s: float  # the profiled windows, one per level
    other_s: float  # teardown and the check that the last deployment is gone

    def start(self, warm: bool) -> float:
        return self.warm_s if warm and self.warm_s is not None else self.cold_s

    def deployment(self, warm: bool, profiled: bool = False) -> float:
        return self.start(warm) + self.judged_s + self.other_s + (self.profiled_s if profiled else 0.0)


@dataclass
class Clock:
    """Each side's times: `prior` from evidence, replaced side by side as this compare measures its own."""

    prior: dict[str, SideTimes]
    source: str  # where `prior` comes from, for the plan's line
    deployments: list[DeploymentTime] = field(default_factory=list)

    def side(self, label: str) -> SideTimes:
        mine = [d for d in self.deployments if d.side == label and not d.profile_only]
        p = self.prior.get(label)
        if not mine:
            if p is None:
                raise KeyError(label)
            return p
        warm = [d.start_s for d in self.deployments if d.side == label][1:]
        prof = [d.profiled_s for d in self.deployments if d.side == label and d.profiled_s > 0]
        return SideTimes(cold_s=mine[0].start_s, warm_s=warm[-1] if warm else p.warm_s if p else None,
                         judged_s=mine[-1].judged_s, profiled_s=prof[-1] if prof else p.profiled_s if p else 0.0,
                         other_s=mine[-1].other_s)

    def started(self, label: str) -> bool:
        return any(d.side == label for d in self.deployments)

    def next_pair_s(self) -> float:
        """The next pair's seconds without profiled windows: each side's warm start where it has started before."""
        return sum(self.side(x).deployment(self.started(x)) for x in SIDES)

    def minimum_s(self) -> float:
        """The minimum design's seconds before anything is deployed: the first pair cold, the rest warm."""
        return sum(self.prior[x].deployment(False) + (MIN_PAIRS - 1) * self.prior[x].deployment(True) for x in SIDES)

    def profiling_s(self) -> float:
        return sum(self.prior[x].profiled_s for x in SIDES)


def fits(used_s: float, more_s: float, budget_s: float | None) -> bool:
    return budget_s is None or used_s + more_s <= budget_s


def pairs_left(clock: Clock, after_s: float, budget_s: float | None, allowed: int) -> int:
    """How many further pairs, of the next pair's predicted length, fit the budget from `after_s` (at most
    `allowed`)."""
    if budget_s is None:
        return allowed
    per = clock.next_pair_s()
    return max(0, min(allowed, int((budget_s - after_s) // per))) if per > 0 else allowed


def profile_first(clock: Clock, sides: tuple[str, str], pair: int, max_pairs: int, used_s: float,
                  budget_s: float | None) -> bool:
    """Whether pair `pair` (1-based)'s first deployment, sides[0] (the other: sides[1]), its judged windows done at
    `used_s`, runs its
    profiled windows now: from the minimum's last pair on, where the budget holds as many further pairs with them
    as without them."""
    if pair < MIN_PAIRS:
        return False
    label, other = sides
    mine, theirs = clock.side(label), clock.side(other)
    after = used_s + mine.other_s + theirs.deployment(clock.started(other))  # the end of this pair
    allowed = max_pairs - pair
    return (fits(after, mine.profiled_s, budget_s)  # within the budget themselves (a Ray compare ran 10 s past it)
            and pairs_left(clock, after + mine.profiled_s, budget_s, allowed) == pairs_left(clock, after, budget_s,
                                                                                          allowed))


def profile_at_stop(clock: Clock, label: str, used_s: float, budget_s: float | None) -> bool:
    """Whether the deployment up at the look that stopped the compare runs its profiled windows."""
    t = clock.side(label)
    return fits(used_s, t.profiled_s + t.other_s, budget_s)  # and its teardown after them


def own_pass_s(clock: Clock, label: str) -> float:
    """A profiled pass of its own: one more warm deployment, its warm-up sweep and profiled windows only."""
    t = clock.side(label)
    return t.start(True) + t.other_s + t.profiled_s + WARMUP_SHARE * t.judged_s


# the warm-up sweep's share of a judged sweep (quick: one wave per level before its windows, about a fifth of the
# sweep on the GPU-like engine); a pass of its own runs it before its profiled windows
WARMUP_SHARE = 0.2


def own_pass(clock: Clock, label: str, used_s: float, budget_s: float | None) -> bool:
    return fits(used_s, own_pass_s(clock, label), budget_s)


def next_after_look(clock: Clock, up: str) -> float:
    """Seconds from a look to the end of the next pair: the deployment still up torn down, then the next pair."""
    return clock.side(up).other_s + clock.next_pair_s()


def out_of_time(clock: Clock, up: str, pair: int, used_s: float, budget_s: float | None) -> bool:
    """The look after pair `pair` (1-based): the budget holds no further pair. Never below the minimum design."""
    return pair >= MIN_PAIRS and not fits(used_s, next_after_look(clock, up), budget_s)


@dataclass
class Schedule:
    """What a compare would do with given true times (harness.measure.budget's rules, step by step)."""

    pairs: int = 0
    end_s: float = 0.0
    profiled: dict[str, str] = field(default_factory=dict)  # side -> "pair k first" | "pair k at stop" | "own pass"


def simulate(truth: dict[str, SideTimes], prior: dict[str, SideTimes], budget_s: float | None, max_pairs: int,
             decided_after: int | None, profiling: bool = True) -> Schedule:
    """The compare's deployments in counterbalanced order with `truth`'s seconds, predicted from `prior` and then
    from what it has measured, as harness.measure.pairs runs them: the looks, the stop, the profiled windows."""
    from harness.analysis.conclude import pair_order

    clock, out, t = Clock(prior=prior, source="simulated"), Schedule(), 0.0
    order = pair_order(max_pairs)

    def deploy(label: str, k: int, profile_at_end) -> bool:
        nonlocal t
        real = truth[label]
        start = real.start(clock.started(label))
        t += start + real.judged_s
        profiled, stop = profile_at_end()
        if profiled:
            t += real.profiled_s
        t += real.other_s
        clock.deployments.append(DeploymentTime(side=label, pair=k, start_s=start, judged_s=real.judged_s,
                                                profiled_s=real.profiled_s if profiled else 0.0,
                                                other_s=real.other_s))
        return stop

    for k in range(1, max_pairs + 1):
        first, second = SIDES if order[k - 1] > 0 else SIDES[::-1]

        def at_first(first: str = first, second: str = second, k: int = k) -> tuple[bool, bool]:
            go = profiling and first not in out.profiled and profile_first(clock, (first, second), k, max_pairs, t,
                                                                           budget_s)
            if go:
                out.profiled[first] = f"pair {k} first"
            return go, False

        def at_look(second: str = second, k: int = k) -> tuple[bool, bool]:
            if k < MIN_PAIRS:
                return False, False
            decided = decided_after is not None and k >= decided_after
            stop = decided or k >= max_pairs or out_of_time(clock, second, k, t, budget_s)
            go = stop and profiling and second not in out.profiled and profile_at_stop(clock, second, t, budget_s)
            if go:
                out.profiled[second] = f"pair {k} at stop"
            return go, stop

        deploy(first, k, at_first)
        out.pairs = k
        if deploy(second, k, at_look):
            break
    for label in SIDES:
        if profiling and label not in out.profiled and own_pass(clock, label, t, budget_s):
            real = truth[label]
            t += real.start(True) + real.other_s + real.profiled_s + WARMUP_SHARE * real.judged_s
            out.profiled[label] = "own pass"
    out.end_s = t
    return out
