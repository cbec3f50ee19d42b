"""The usage the OpenAI chat and completion formats write: OpenAI's fields, with speculative
decoding's drafts told as OpenAI tells Predicted Outputs (accepted and rejected prediction tokens)."""

from __future__ import annotations

from mlxhost.wire.chunks import ChatFormat, CompletionFormat, Delta


def final(tokens: int, drafted: int = 0, accepted: int = 0, cached: int = 0) -> Delta:
    return Delta(
        "", tokens, finish_reason="stop", cached_tokens=cached, drafted_tokens=drafted,
        accepted_tokens=accepted,
    )  # fmt: skip


def test_a_chat_answer_s_usage_says_how_many_drafts_were_accepted_and_rejected() -> None:
    answer = final(20, drafted=18, accepted=11, cached=8)
    body = ChatFormat("m", prompt_tokens=12).whole("hello", None, answer)
    assert body["usage"] == {
        "prompt_tokens": 12,
        "completion_tokens": 20,
        "total_tokens": 32,
        "prompt_tokens_details": {"cached_tokens": 8},
        "completion_tokens_details": {"accepted_prediction_tokens": 11, "rejected_prediction_tokens": 7},
    }


def test_without_drafts_the_details_say_none_were_predicted() -> None:
    chunk = ChatFormat("m", prompt_tokens=3, include_usage=True).usage_chunk(final(4))
    assert chunk["choices"] == []
    assert chunk["usage"]["completion_tokens_details"] == {
        "accepted_prediction_tokens": 0,
        "rejected_prediction_tokens": 0,
    }
    assert chunk["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}


def test_the_choices_drafts_add_up_as_their_completions_do() -> None:
    finals = (final(10, drafted=6, accepted=4, cached=5), final(7, drafted=3, accepted=3, cached=2))
    usage = ChatFormat("m", prompt_tokens=9, include_usage=True).usage_chunk(*finals)["usage"]
    assert usage["completion_tokens"] == 17 and usage["prompt_tokens_details"] == {"cached_tokens": 2}
    assert usage["completion_tokens_details"] == {
        "accepted_prediction_tokens": 7,
        "rejected_prediction_tokens": 2,
    }


def test_a_text_completion_reports_its_drafts_too() -> None:
    # The SDKs read /v1/completions' usage as the same CompletionUsage as chat's.
    body = CompletionFormat("m", prompt_tokens=2).whole("x", None, final(5, drafted=4, accepted=1))
    assert body["usage"]["completion_tokens_details"] == {
        "accepted_prediction_tokens": 1,
        "rejected_prediction_tokens": 3,
    }
