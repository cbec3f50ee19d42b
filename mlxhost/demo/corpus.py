"""The text the demo tokenizer is trained on, generated here from a fixed seed.

Multi-byte UTF-8 is deliberately plentiful (accents, CJK, other scripts,
emoji) so the vocabulary holds merged multi-byte characters as well as the
lone continuation bytes that make streaming detokenizers wait for the rest
of a character.
"""

from __future__ import annotations

import random
from typing import Final

__all__ = ["corpus"]

# Word pools.
_WORDS: Final = (
    "the a of and to in is it that was for on are with as this be at by from or "
    "have not but what all were when we there can an your which their said if do "
    "will each about how up out them then she many some so these would other into "
    "has more her two like him see time could no make than first been its who now "
    "model token stream reply server request cache batch prompt answer question "
    "hello world thanks please yes okay good morning evening weather today"
).split()
_ACCENTED: Final = (
    "café naïve façade déjà vu crème brûlée résumé garçon señor niño jalapeño "
    "piñata über straße größe Zürich Müller smörgåsbord Ångström coöperate "
    "élève forêt hôtel Noël Æsir œuvre São Paulo açaí Kraków Łódź Dvořák "
    "Malmö fjörður Reykjavík"
).split()
_CJK: Final = (
    "日本語のテキスト 日本語 東京 京都 こんにちは ありがとう 今日は 天気 学生 "
    "先生 世界 カタカナ ひらがな 漢字 中文 你好 谢谢 北京 上海 汉字 "
    "한국어 안녕하세요 감사합니다 서울"
).split()
_OTHER_SCRIPTS: Final = (
    "Привет мир спасибо Москва Ελληνικά καλημέρα Αθήνα שלום مرحبا شكرا "
    "नमस्ते धन्यवाद สวัสดี Γειά"
).split()
_EMOJI: Final = (
    "🙂 🚀 🎉 👍 🔥 🤖 🌍 ✨ 😂 ❤️ 👩‍💻 🇯🇵 🍣 🐍 ☕ 🙂🚀 ✅ 💡"
).split()
_PUNCTUATION: Final = (",", ".", "!", "?", ":", ";", "...", "—", "…", "«", "»", "“", "”")
_CONSONANTS: Final = "bcdfghjklmnprstvwzçñßšž"
_VOWELS: Final = "aeiouyàáâäèéêëìíîïòóôöùúûüå"
_KANA: Final = "あいうえおかきくけこさしすせそたちつてとなにぬねのまみむめもらりるれろアイウエオカキクケコサシスセソ"
_HANGUL: Final = "가나다라마바사아자차카타파하"


def corpus(words: int) -> list[str]:
    # random.Random's sequence for a given seed is stable across Python
    # versions, which keeps the trained vocabulary byte-identical.
    rng = random.Random(20240601)
    out: list[str] = []
    for _ in range(words):
        r = rng.random()
        if r < 0.30:
            # Invented words give BPE enough distinct pairs to fill a large
            # vocabulary, and spread accents across many merges.
            w = "".join(rng.choice(_CONSONANTS) + rng.choice(_VOWELS) for _ in range(rng.randint(1, 4)))
        elif r < 0.45:
            w = rng.choice(_WORDS)
        elif r < 0.52:
            w = rng.choice(_ACCENTED)
        elif r < 0.60:
            w = rng.choice(_CJK)
        elif r < 0.66:
            w = "".join(rng.choice(_KANA) for _ in range(rng.randint(2, 5)))
        elif r < 0.70:
            w = "".join(rng.choice(_HANGUL) for _ in range(rng.randint(2, 4)))
        elif r < 0.75:
            w = rng.choice(_OTHER_SCRIPTS)
        elif r < 0.81:
            w = rng.choice(_EMOJI)
        elif r < 0.87:
            w = str(rng.randint(0, 99999))
        elif r < 0.95:
            w = rng.choice(_PUNCTUATION)
        else:
            w = "\n"
        if rng.random() < 0.1:
            w = w.capitalize()
        out.append(w)
    # Short chunks, the way documents would be fed to the trainer.
    return [" ".join(out[i : i + 200]) for i in range(0, len(out), 200)]
