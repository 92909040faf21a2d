"""Prompts of exactly N tokens, reproducible from the seed; conversations that fit the context."""

from __future__ import annotations

from launcher.bench import scrape
from launcher.bench.workload import WORDS, Settings, TextMaker, turns_that_fit, user_rng


def bpe_like(text: str) -> int:
    """A tokenizer whose words cost 1 to 3 tokens (by length), like a byte-level BPE on plain words."""
    return sum(1 + len(w) // 5 for w in text.split())


def test_texts_have_exactly_the_tokens_asked_and_follow_the_seed() -> None:
    calls: list[str] = []

    def count(text: str) -> int:
        calls.append(text)
        return bpe_like(text)

    maker = TextMaker(count)
    for tokens in (1, 7, 128, 1000):
        assert bpe_like(maker.make(tokens, user_rng(0, 1))) == tokens
    assert maker.make(64, user_rng(3, 2)) == maker.make(64, user_rng(3, 2))
    assert maker.make(64, user_rng(3, 2)) != maker.make(64, user_rng(3, 3)), "each user's text differs"
    before = len(calls)
    maker.make(500, user_rng(9, 0))
    assert len(calls) - before == 2, "one check a text (and the empty-prefix count), once the words are costed"
    assert len(maker.costs()) == len(WORDS)


def test_a_tokenizer_that_merges_across_words_still_gets_its_exact_count() -> None:
    """When words are not additive (a miss on the check), the text is trimmed by bisection instead."""
    def merging(text: str) -> int:
        return max(0, bpe_like(text) - text.count(" time "))

    text = TextMaker(merging).make(50, user_rng(1, 0))
    assert merging(text) == 50


def test_turns_that_fit_the_context() -> None:
    settings = Settings(turn_tokens=100, max_tokens=20)
    # 150 + 20 ≤ 400; 150 + 130 + 20 ≤ 400; 150 + 260 + 20 > 400
    assert turns_that_fit(150, settings, overhead=10, context=400) == 2
    assert turns_that_fit(500, settings, overhead=10, context=400) == 0


def test_counters_are_deltas_and_names_follow_the_version() -> None:
    before = scrape.parse('vllm:prefix_cache_queries_total{model_name="m"} 100\nvllm:prefix_cache_hits_total 40\n'
                          "vllm:num_preemptions_total 2\n# HELP x\n")
    after = scrape.parse("vllm:prefix_cache_queries_total 300\nvllm:prefix_cache_hits_total 190\n"
                         "vllm:num_preemptions_total 5\nvllm:kv_cache_usage_perc 0.5\n")
    counters = scrape.counters(before, after, kv_max=0.75)
    assert (counters.prefix_cache_hit_rate, counters.kv_cache_usage_max, counters.preemptions) == (0.75, 0.75, 3)
    v0 = scrape.counters({}, scrape.parse("vllm:gpu_prefix_cache_hit_rate 0.5\nvllm:gpu_cache_usage_perc 0.1\n"), None)
    assert v0.prefix_cache_hit_rate == 0.5 and v0.preemptions is None
