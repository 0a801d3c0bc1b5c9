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
        read = max(prompt_tokens, 1) / first_token_s
        write = answer_tokens / writing_s
        known = self._paces.get(model)
        if known is None:
            self._paces[model] = Pace(read, write)
            return
        known.read_tps += NEWEST * (read - known.read_tps)
        known.write_tps += NEWEST * (write - known.write_tps)
        known.calls += 1
