"""I/O. Writes the demo tokenizer's training corpus into scripts/demo_corpus/ (our own text).

Every line comes from word lists and small grammars written for this project, drawn with a
seeded RNG, so the corpus is reproducible byte for byte: `python scripts/make_demo_corpus.py`
rewrites the committed files unchanged. It mixes English-like prose, Python-like code, numbers
and tables, and CJK, accented Latin and emoji, so that the trained byte-level BPE learns merges
for ASCII words and multi-byte characters alike.
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Callable
from pathlib import Path

CORPUS_DIR = Path(__file__).resolve().parent / "demo_corpus"
SEED = 20240611

DETERMINERS = ["the", "a", "every", "each", "some", "one", "this", "that", "no", "our", "their"]
ADJECTIVES = [
    "quiet", "bright", "narrow", "patient", "hollow", "crisp", "gentle", "stubborn", "early",
    "distant", "copper", "lazy", "rapid", "silver", "tidy", "curious", "heavy", "plain", "warm",
    "small", "ancient", "careful", "noisy", "fresh", "little", "green", "brave", "final",
]  # fmt: skip
NOUNS = [
    "river", "lantern", "engine", "garden", "stream", "token", "window", "harbor", "signal",
    "teacher", "kettle", "bridge", "request", "market", "orchard", "ladder", "message", "server",
    "village", "compass", "painter", "letter", "socket", "meadow", "worker", "baker", "channel",
    "mountain", "record", "island", "clock", "gateway", "library", "sailor", "number", "field",
]  # fmt: skip
VERBS = [
    "carries", "watches", "follows", "builds", "answers", "crosses", "holds", "sends", "finds",
    "waits for", "opens", "closes", "counts", "measures", "repairs", "remembers", "greets",
    "reads", "writes", "keeps", "moves past", "leans on", "returns", "streams",
]  # fmt: skip
ADVERBS = [
    "slowly", "quickly", "again", "rarely", "gladly", "softly", "twice", "today", "later",
    "carefully", "at once", "all night", "before dawn", "without a sound",
]  # fmt: skip
PREPOSITIONS = ["near", "under", "beside", "across", "behind", "toward", "above", "within"]
NAMES = ["Mira", "Tobin", "Alder", "Senna", "Ivo", "Lark", "Noor", "Pell", "Rune", "Wren"]
EXTRA_WORDS = [
    "able", "about", "above", "across", "action", "active", "actual", "adapt", "admit",
    "adult", "advice", "afford", "afraid", "after", "again", "agent", "agree", "ahead",
    "alarm", "album", "alert", "alike", "alive", "allow", "alone", "along", "alter", "amber",
    "among", "amount", "anchor", "angle", "animal", "annual", "answer", "anyone", "apart",
    "apple", "apply", "april", "arch", "area", "argue", "arise", "armor", "arrow", "artist",
    "aspect", "assume", "attach", "attempt", "autumn", "avenue", "average", "avoid", "awake",
    "award", "aware", "badge", "balance", "ballad", "bamboo", "banner", "barely", "barrel",
    "basket", "battle", "beacon", "beauty", "become", "before", "begin", "behave", "belong",
    "below", "bench", "beyond", "bicycle", "billow", "binder", "biscuit", "blanket", "blend",
    "blossom", "border", "borrow", "bottle", "bounce", "branch", "breeze", "bright", "broad",
    "bucket", "budget", "bundle", "burden", "butter", "cabin", "cable", "camera", "candle",
    "canvas", "canyon", "carbon", "career", "carpet", "carton", "castle", "casual", "catalog",
    "cattle", "cellar", "cement", "center", "century", "chapter", "charge", "cherry",
    "chimney", "choice", "circle", "citizen", "clever", "climate", "closet", "cluster",
    "coastal", "cobalt", "coffee", "collar", "column", "comfort", "common", "cookie", "corner",
    "cotton", "county", "couple", "cousin", "cradle", "credit", "crystal", "culture",
    "current", "curtain", "cushion", "dancer", "danger", "debate", "decade", "decide",
    "degree", "delight", "demand", "dentist", "desert", "design", "detail", "device",
    "diamond", "diary", "dinner", "direct", "divide", "doctor", "dollar", "domain", "double",
    "dragon", "drawer", "driver", "during", "eager", "eastern", "easy", "effort", "eighty",
    "either", "elbow", "eleven", "empire", "empty", "enough", "entire", "equal", "escape",
    "evening", "exact", "except", "excuse", "expert", "export", "fabric", "factor", "falcon",
    "family", "famous", "farmer", "fashion", "father", "feather", "fellow", "fence", "fiction",
    "figure", "filter", "finger", "finish", "flavor", "flight", "flower", "folder", "follow",
    "forest", "forget", "formal", "fossil", "fountain", "fragile", "freedom", "friend",
    "frozen", "future", "galaxy", "gallery", "garage", "garlic", "gather", "general", "genius",
    "giant", "ginger", "glacier", "global", "golden", "gossip", "govern", "gravel", "guitar",
    "hammer", "handle", "happen", "harvest", "hazard", "health", "helmet", "hidden", "history",
    "hockey", "holiday", "honest", "honey", "horizon", "hunger", "husband", "iceberg", "idea",
    "ignore", "image", "impact", "import", "income", "indoor", "infant", "inform", "injury",
    "insect", "inside", "invite", "iron", "ivory", "jacket", "jaguar", "jelly", "jewel",
    "journey", "judge", "jungle", "junior", "justice", "kernel", "kidney", "kingdom",
    "kitchen", "kitten", "knife", "ladder", "lagoon", "language", "laptop", "later", "launch",
    "lawyer", "leader", "legend", "lemon", "length", "lesson", "liberty", "lizard", "lobster",
    "locket", "lonely", "lumber", "machine", "magnet", "mammal", "manage", "mango", "marble",
    "margin", "marine", "master", "matter", "meadow", "medal", "melody", "member", "memory",
    "mentor", "method", "middle", "minute", "mirror", "mobile", "modern", "moment", "monkey",
    "morning", "mosaic", "mother", "motion", "muffin", "museum", "mystery", "napkin", "nation",
    "nature", "needle", "nephew", "network", "neutral", "nickel", "night", "noble", "normal",
    "notice", "novel", "nuclear", "number", "object", "ocean", "office", "olive", "onion",
    "option", "orange", "orbit", "orchid", "origin", "outer", "output", "oxygen", "oyster",
    "paddle", "palace", "panel", "parade", "parrot", "pasta", "patrol", "pebble", "pencil",
    "pepper", "permit", "person", "picnic", "pillow", "pioneer", "planet", "plastic", "pocket",
    "poetry", "polite", "portal", "potato", "powder", "prairie", "predict", "prison", "profit",
    "prompt", "proof", "public", "puzzle", "pyramid", "quarter", "question", "rabbit", "radar",
    "random", "rather", "reason", "recipe", "reform", "region", "remote", "rescue", "result",
    "retire", "reveal", "ribbon", "rifle", "ripple", "ritual", "robust", "rocket", "rubber",
    "saddle", "safety", "salmon", "sample", "satin", "scarf", "school", "science", "season",
    "second", "secret", "select", "senior", "series", "shadow", "shelter", "silent", "simple",
    "sister", "sketch", "slogan", "soccer", "sphere", "spider", "spirit", "spring", "square",
    "stable", "station", "statue", "stereo", "sticky", "stomach", "strong", "studio",
    "subject", "summer", "sunset", "supply", "surface", "symbol", "system", "tablet", "talent",
    "target", "teapot", "temple", "tennis", "thunder", "ticket", "timber", "tiny", "toast",
    "tomato", "tongue", "topic", "tornado", "tower", "traffic", "travel", "tribute", "trophy",
    "tunnel", "turtle", "twelve", "typical", "umbrella", "uncle", "unique", "update", "useful",
    "valley", "velvet", "venture", "verbal", "vessel", "victory", "village", "violin",
    "virtual", "vision", "visual", "volcano", "voyage", "waffle", "walnut", "wander",
    "warrior", "weather", "wedding", "weekend", "whisper", "window", "winter", "wisdom",
    "wonder", "wooden", "yellow", "yogurt", "zebra", "zigzag",
]  # fmt: skip
SYLLABLES = [
    "ka", "lo", "mer", "tis", "an", "vel", "dor", "ith", "sum", "pra", "qui", "ben", "zo", "rah",
    "nel", "fi", "gor", "tu", "wex", "ly", "shan", "cho", "ost", "ire", "bal", "den", "mu", "ras",
    "ur", "ven", "sil", "tor", "ea", "pin", "hal", "ko", "dre", "vi", "nox", "el", "sa", "gra",
]  # fmt: skip
CONNECTORS = ["and then", "but", "so", "while", "because", "although", "until", "after"]

CODE_WORDS = [
    "count", "value", "item", "result", "buffer", "name", "limit", "offset", "index", "total",
    "chunk", "state", "queue", "reader", "writer", "token", "prompt", "config", "path", "size",
    "delay", "batch", "entry", "record", "stop", "text", "ids", "node", "level", "window",
]  # fmt: skip
CODE_VERBS = [
    "load", "parse", "build", "scan", "merge", "split", "read", "write", "send", "fetch", "check",
    "render", "encode", "decode", "flush", "drain", "apply", "collect", "update", "format",
]  # fmt: skip
TYPES = ["int", "str", "bytes", "float", "bool", "list[int]", "dict[str, int]", "tuple[int, ...]"]
OPERATORS = ["+", "-", "*", "//", "%", "<<", ">>", "&", "|", "^"]
COMPARATORS = ["==", "!=", "<", "<=", ">", ">=", "is", "is not", "in", "not in"]

CHINESE = [
    "你好", "世界", "模型", "数据", "时间", "中文", "文字", "今天", "明天", "朋友", "学习", "问题",
    "答案", "服务", "请求", "网络", "天气", "城市", "山水", "工作", "电脑", "音乐", "故事", "早上",
]  # fmt: skip
JAPANESE = [
    "こんにちは", "ありがとう", "さようなら", "おはよう", "日本語", "東京", "桜", "水曜日",
    "ねこ", "いぬ", "カメラ", "コーヒー", "テスト", "トークン", "サーバー", "すこし",
]  # fmt: skip
KOREAN = [
    "안녕하세요",
    "감사합니다",
    "서울",
    "바다",
    "하늘",
    "사람",
    "시간",
    "노래",
    "친구",
    "학교",
]
ACCENTED = [
    "café", "naïve", "façade", "jalapeño", "über", "crème", "déjà", "señor", "smörgås", "fjörd",
    "Zürich", "São Paulo", "Ærø", "Łódź", "Kraków", "Ελλάδα", "Москва", "привет", "straße",
]  # fmt: skip
EMOJI = [
    "🚀", "💡", "🎉", "🌧", "🌲", "🐍", "🍵", "🔥", "✨", "🙂", "📦", "🧭", "⚙", "🌍", "🎲", "🐢",
    "👍", "❤", "🌙", "☕", "🧪", "📈",
]  # fmt: skip
SYMBOLS = ["×", "÷", "°", "€", "£", "¥", "–", "—", "Δ", "∆", "±", "≈", "≤", "≥", "→", "…", "•"]


def noun_phrase(rng: random.Random) -> str:
    words = [rng.choice(DETERMINERS)]
    if rng.random() < 0.6:
        words.append(rng.choice(ADJECTIVES))
    words.append(rng.choice(NOUNS))
    return " ".join(words)


def clause(rng: random.Random) -> str:
    subject = rng.choice(NAMES) if rng.random() < 0.3 else noun_phrase(rng)
    parts = [subject, rng.choice(VERBS), noun_phrase(rng)]
    if rng.random() < 0.4:
        parts += [rng.choice(PREPOSITIONS), noun_phrase(rng)]
    if rng.random() < 0.4:
        parts.append(rng.choice(ADVERBS))
    return " ".join(parts)


def sentence(rng: random.Random) -> str:
    text = clause(rng)
    if rng.random() < 0.35:
        text += f", {rng.choice(CONNECTORS)} {clause(rng)}"
    text = text[0].upper() + text[1:]
    roll = rng.random()
    if roll < 0.12:
        return f"Is it true that {subject_lower(text)}?"
    if roll < 0.2:
        return f'"{text}!" said {rng.choice(NAMES)}.'
    if roll < 0.26:
        return f"{text} ({rng.randint(2, 99)} times in all)."
    return text + "."


def subject_lower(text: str) -> str:
    """Lower-case the first letter unless the sentence opens with a name."""
    if text.split(" ", 1)[0] in NAMES:
        return text
    return text[0].lower() + text[1:]


def plain_sentence(rng: random.Random) -> str:
    text = clause(rng)
    return text[0].upper() + text[1:] + "."


def invented_word(rng: random.Random) -> str:
    return "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4)))


def glossary_line(rng: random.Random) -> str:
    term = invented_word(rng).capitalize()
    words = " ".join(rng.choice(EXTRA_WORDS) for _ in range(rng.randint(4, 12)))
    place = invented_word(rng).capitalize()
    return (
        f"{term} (from {place}): {words}; see also {invented_word(rng)}, {rng.choice(EXTRA_WORDS)}."
    )


def prose_line(rng: random.Random) -> str:
    if rng.random() < 0.3:
        return glossary_line(rng)
    return " ".join(sentence(rng) for _ in range(rng.randint(2, 6)))


def identifier(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.4:
        return rng.choice(CODE_WORDS)
    if roll < 0.7:
        return f"{rng.choice(CODE_WORDS)}_{rng.choice(CODE_WORDS)}"
    if roll < 0.85:
        return f"{rng.choice(EXTRA_WORDS)}_{rng.choice(CODE_WORDS)}"
    return rng.choice(EXTRA_WORDS) + rng.choice(EXTRA_WORDS).capitalize()


def expression(rng: random.Random, depth: int = 0) -> str:
    roll = rng.random()
    if depth > 1 or roll < 0.3:
        return identifier(rng)
    if roll < 0.45:
        return str(rng.randint(0, 4096))
    if roll < 0.55:
        return f'"{rng.choice(NOUNS)} {rng.choice(ADJECTIVES)}"'
    if roll < 0.75:
        left, right = expression(rng, depth + 1), expression(rng, depth + 1)
        return f"{left} {rng.choice(OPERATORS)} {right}"
    if roll < 0.9:
        args = ", ".join(expression(rng, depth + 1) for _ in range(rng.randint(0, 3)))
        return f"{rng.choice(CODE_VERBS)}_{rng.choice(CODE_WORDS)}({args})"
    return f"[{identifier(rng)} for {rng.choice(CODE_WORDS)} in {identifier(rng)}]"


def statement(rng: random.Random, indent: str) -> list[str]:
    roll = rng.random()
    if roll < 0.35:
        return [f"{indent}{identifier(rng)} = {expression(rng)}"]
    if roll < 0.5:
        condition = f"{identifier(rng)} {rng.choice(COMPARATORS)} {expression(rng, 1)}"
        return [f"{indent}if {condition}:", f"{indent}    {identifier(rng)} += {rng.randint(1, 9)}"]
    if roll < 0.62:
        loop = f"for {rng.choice(CODE_WORDS)} in range({rng.randint(1, 64)}):"
        return [f"{indent}{loop}", f"{indent}    {identifier(rng)}.append({expression(rng, 1)})"]
    if roll < 0.72:
        return [f"{indent}# {sentence(rng).lower()}"]
    if roll < 0.82:
        return [
            f'{indent}print(f"{{{identifier(rng)}}} {rng.choice(NOUNS)}s: {{{identifier(rng)}!r}}")'
        ]
    if roll < 0.9:
        return [f"{indent}assert {identifier(rng)} {rng.choice(COMPARATORS)} {expression(rng, 1)}"]
    return [f'{indent}raise ValueError("{rng.choice(ADJECTIVES)} {rng.choice(NOUNS)}")']


def function_block(rng: random.Random, indent: str = "") -> list[str]:
    name = f"{rng.choice(CODE_VERBS)}_{rng.choice(CODE_WORDS)}"
    params = ", ".join(
        f"{rng.choice(CODE_WORDS)}: {rng.choice(TYPES)}" for _ in range(rng.randint(0, 3))
    )
    lines = [f"{indent}def {name}({params}) -> {rng.choice(TYPES)}:"]
    lines.append(f'{indent}    """{plain_sentence(rng)}"""')
    for _ in range(rng.randint(2, 7)):
        lines += statement(rng, indent + "    ")
    lines.append(f"{indent}    return {expression(rng)}")
    return [*lines, ""]


def code_block(rng: random.Random) -> list[str]:
    roll = rng.random()
    if roll < 0.15:
        module = f"{rng.choice(CODE_WORDS)}_{rng.choice(CODE_VERBS)}s"
        return [f"from {module} import {identifier(rng)}, {identifier(rng)}", ""]
    if roll < 0.35:
        name = rng.choice(NOUNS).capitalize() + rng.choice(CODE_WORDS).capitalize()
        lines = [f"class {name}:", f'    """{plain_sentence(rng)}"""', ""]
        lines += [f"    {identifier(rng)}: {rng.choice(TYPES)} = {rng.randint(0, 99)}", ""]
        return lines + function_block(rng, "    ")
    return function_block(rng)


def number_line(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.2:
        cells = [rng.choice(NOUNS), str(rng.randint(0, 100000)), f"{rng.uniform(0, 1000):.2f}"]
        return ",".join([*cells, f"{rng.randint(1, 12):02d}/{rng.randint(1, 28):02d}"])
    if roll < 0.35:
        y, mo, d = rng.randint(1990, 2030), rng.randint(1, 12), rng.randint(1, 28)
        h, mi, s = rng.randint(0, 23), rng.randint(0, 59), rng.randint(0, 59)
        return (
            f"{y}-{mo:02d}-{d:02d}T{h:02d}:{mi:02d}:{s:02d}Z {rng.choice(VERBS)} {noun_phrase(rng)}"
        )
    if roll < 0.5:
        a, b = rng.randint(0, 999), rng.randint(1, 999)
        op = rng.choice(["+", "-", "*", "/"])
        result = {"+": a + b, "-": a - b, "*": a * b, "/": round(a / b, 4)}[op]
        return f"{a} {op} {b} = {result}"
    if roll < 0.62:
        fields = {
            "id": rng.randint(1, 99999),
            "name": rng.choice(NOUNS),
            "ok": rng.choice(["true", "false", "null"]),
        }
        body = ", ".join(
            f'"{k}": {v if k != "name" else chr(34) + str(v) + chr(34)}' for k, v in fields.items()
        )
        return "{" + body + f', "score": {rng.uniform(-5, 5):.3f}' + "}"
    if roll < 0.72:
        version = f"v{rng.randint(0, 9)}.{rng.randint(0, 40)}.{rng.randint(0, 200)}"
        return f"{version} ({rng.randint(1, 64)} MiB, {rng.randint(0, 100)}%)"
    if roll < 0.84:
        cells = [f"{rng.randint(0, 9999):>5}" for _ in range(rng.randint(3, 7))]
        return "| " + " | ".join(cells) + " |"
    if roll < 0.92:
        return f"0x{rng.getrandbits(32):08x} 0o{rng.randint(0, 511):o} 0b{rng.getrandbits(8):08b}"
    return f"{rng.randint(1, 50)}. {sentence(rng)} ~{rng.randint(1, 9)}.{rng.randint(0, 9)} kg"


def multilingual_line(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.25:
        return "".join(rng.choice(CHINESE) for _ in range(rng.randint(3, 9))) + rng.choice(
            ["。", "！", "？", "，好的。"]
        )
    if roll < 0.4:
        return "、".join(rng.choice(JAPANESE) for _ in range(rng.randint(2, 5))) + "。"
    if roll < 0.5:
        return " ".join(rng.choice(KOREAN) for _ in range(rng.randint(2, 6))) + "."
    if roll < 0.7:
        words = sentence(rng).split()
        spot = rng.randrange(len(words))
        words.insert(spot, rng.choice(EMOJI))
        return " ".join(words) + " " + rng.choice(EMOJI)
    if roll < 0.85:
        trip = f"{rng.choice(NAMES)} visited {rng.choice(ACCENTED)} and {rng.choice(ACCENTED)}"
        return f"{trip}; {sentence(rng)}"
    a, b = rng.randint(1, 99), rng.randint(1, 99)
    formula = f"{a} {rng.choice(SYMBOLS)} {b} {rng.choice(SYMBOLS)} {rng.randint(0, 360)}°"
    return f"{formula} {rng.choice(EMOJI)} {rng.choice(CHINESE)}"


def lines_until(target_bytes: int, produce: Callable[[], list[str]]) -> str:
    out: list[str] = []
    size = 0
    while size < target_bytes:
        for line in produce():
            out.append(line)
            size += len(line.encode("utf-8")) + 1
    return "\n".join(out) + "\n"


def corpus_files() -> dict[str, str]:
    """File name → content. Each file has its own RNG so editing one leaves the others alone."""
    rng_prose, rng_code = random.Random(SEED), random.Random(SEED + 1)
    rng_numbers, rng_multi = random.Random(SEED + 2), random.Random(SEED + 3)
    return {
        "prose.txt": lines_until(110_000, lambda: [prose_line(rng_prose)]),
        "code.txt": lines_until(90_000, lambda: code_block(rng_code)),
        "numbers.txt": lines_until(45_000, lambda: [number_line(rng_numbers)]),
        "multilingual.txt": lines_until(55_000, lambda: [multilingual_line(rng_multi)]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=CORPUS_DIR, help="directory to write into")
    args = parser.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    for name, text in corpus_files().items():
        (out / name).write_text(text, encoding="utf-8", newline="\n")
        print(f"wrote {out / name} ({len(text.encode('utf-8'))} bytes)")


if __name__ == "__main__":
    main()
