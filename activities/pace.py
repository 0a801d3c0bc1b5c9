"""How fast a model answers, learned from the calls made to it: how many prompt tokens a
second it reads (time to the first token) and how many tokens a second it writes. A call
is sized by it: `max_tokens` is what the model can write in the time the call has, so a
slow server gets a shorter answer, not a timed-out one asked again whole."""

from __future__ import annotations

from dataclasses import dataclass

# Weight of the newest call in the running averages.
NEWEST = 0.3
# Calls that wrote fewer tokens than this say little about the writing pace.
MIN_TOKENS_MEASURED = 8
# How many times faster a model reads a prompt token than it writes one, assumed of a call
# asked whole before any call showed the model's pace (about so on CPU servers).
READ_OVER_WRITE = 10.0


@dataclass
class Pace:
    """One model's pace, averaged over its calls."""

    read_tps: float  # prompt tokens read a second, until the first token
    write_tps: float  # tokens written a second, after the first
    calls: int = 1

    def seconds(self, prompt_tokens: int, answer_tokens: int) -> float:
        """How long a call of this size takes."""
        return prompt_tokens / self.read_tps + answer_tokens / self.write_tps

    def tokens_within(self, prompt_tokens: int, seconds: float) -> int:
        """How many tokens the model writes in `seconds` after reading the prompt."""
        writing = seconds - prompt_tokens / self.read_tps
        return max(0, int(writing * self.write_tps))


class Paces:
    """Each model's pace at one server, as this process has seen it."""

    def __init__(self) -> None:
        self._paces: dict[str, Pace] = {}

    def get(self, model: str) -> Pace | None:
        """The model's pace, once a call has shown it."""
        return self._paces.get(model)

    def record(
        self,
        model: str,
        prompt_tokens: int,
        answer_tokens: int,
        first_token_s: float,
        writing_s: float,
    ) -> None:
        """Learn from a streamed call: the prompt read in `first_token_s`, the answer
        written in `writing_s` after that."""
        if answer_tokens < MIN_TOKENS_MEASURED or first_token_s <= 0 or writing_s <= 0:
            return
        self._learn(model, max(prompt_tokens, 1) / first_token_s, answer_tokens / writing_s)

    def record_whole(
        self, model: str, prompt_tokens: int, answer_tokens: int, seconds: float
    ) -> None:
        """Learn from a call asked whole, which shows only how long it took in all: split as
        the pace known says (or, before one is, as reading READ_OVER_WRITE times faster than
        writing), and slower or faster in proportion."""
        if answer_tokens < MIN_TOKENS_MEASURED or seconds <= 0:
            return
        prompt_tokens = max(prompt_tokens, 1)
        known = self._paces.get(model) or Pace(READ_OVER_WRITE, 1.0)
        slower = seconds / known.seconds(prompt_tokens, answer_tokens)
        self._learn(model, known.read_tps / slower, known.write_tps / slower)

    def _learn(self, model: str, read: float, write: float) -> None:
        known = self._paces.get(model)
        if known is None:
            self._paces[model] = Pace(read, write)
            return
        known.read_tps += NEWEST * (read - known.read_tps)
        known.write_tps += NEWEST * (write - known.write_tps)
        known.calls += 1
