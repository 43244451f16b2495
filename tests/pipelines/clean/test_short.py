import hashlib
import pickle
import shutil

import pytest

from pipelines.clean.short import REPO, ShortConfig, ShortStage
from schemas.deadletter import Dropped, RecordError
from schemas.page import PageRecord, ProvenanceStep, page_id

TOKENIZER = REPO / "assets" / "tokenizer" / "tokenizer.json"


def record(response: object) -> PageRecord:
    image = b"\x89PNG\r\n\x1a\n"
    return PageRecord(
        id=page_id("s", "doc", 1), source="s", source_id="doc", page_number=1, domain="d", language="en",
        license="cc0", image=image, image_sha256=hashlib.sha256(image).hexdigest(), width=1, height=1,
        task="parse_page", instruction="Convert.", response=response,  # type: ignore[arg-type]
        provenance=[ProvenanceStep("read:s", "1", "x")],
    )


@pytest.fixture(scope="module")
def stage() -> ShortStage:
    return ShortStage()


def test_committed_tokenizer_is_byte_level_bpe_of_about_8000():
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(TOKENIZER))
    assert tok.get_vocab_size() == 7962
    assert tok.encode("The quick brown fox jumps over the lazy dog.", add_special_tokens=False).tokens[:4] == [
        "The", "Ġqu", "ick", "Ġbrow"]
    # byte level: any string encodes without unknown tokens and decodes back
    text = "Résumé 北京 \\(x^2\\)"
    assert tok.decode(tok.encode(text, add_special_tokens=False).ids) == text


def test_counts_tokens_with_the_committed_tokenizer(stage):
    assert stage.count("The quick brown fox jumps over the lazy dog.") == (18, False)
    assert stage.count("Hello world") == (4, False)


def test_exactly_min_tokens_is_kept_one_less_is_dropped(stage):
    kept = stage(record(" ".join(["table"] * 64)))[0]
    assert kept.quality["short"] == {"token_count": 64}
    assert kept.provenance[-1].stage == "clean:short"
    short = record(" ".join(["table"] * 63))
    with pytest.raises(Dropped) as info:
        stage(short)
    assert info.value.reason == "short_response"
    assert short.quality["short"] == {"token_count": 63}


def test_min_tokens_is_configurable():
    stage = ShortStage(ShortConfig(min_tokens=4))
    assert stage(record("Hello world"))[0].quality["short"]["token_count"] == 4
    with pytest.raises(Dropped):
        stage(record("the model"))  # 2 tokens


def test_tokenizer_path_accepts_a_folder_and_an_absolute_file(tmp_path):
    shutil.copy(TOKENIZER, tmp_path / "tokenizer.json")
    by_folder = ShortStage(ShortConfig(tokenizer_path=str(tmp_path)))
    by_file = ShortStage(ShortConfig(tokenizer_path=str(tmp_path / "tokenizer.json")))
    assert by_folder.count("Hello world") == by_file.count("Hello world") == (4, False)


def test_missing_tokenizer_is_a_config_error(tmp_path):
    with pytest.raises(ValueError, match="no tokenizer.json"):
        ShortStage(ShortConfig(tokenizer_path=str(tmp_path)))
    with pytest.raises(ValueError, match="min_tokens"):
        ShortStage(ShortConfig(min_tokens=0))
    # a file that is there but is no tokenizer (a git-lfs pointer) fails at start-up too, not once per record
    (tmp_path / "tokenizer.json").write_text("version https://git-lfs.github.com/spec/v1\noid sha256:00\nsize 1\n")
    with pytest.raises(ValueError, match=r"is not a tokenizer\.json"):
        ShortStage(ShortConfig(tokenizer_path=str(tmp_path)))


def test_pickles_without_the_loaded_tokenizer(stage):
    stage.count("warm up")
    blob = pickle.dumps(stage)
    assert len(blob) < 2000
    clone = pickle.loads(blob)
    assert clone._tokenizer is None
    assert clone.count("Hello world") == (4, False)


@pytest.mark.parametrize("response", ["", "  \n\t"])
def test_empty_responses_are_dropped(stage, response):
    with pytest.raises(Dropped) as info:
        stage(record(response))
    assert info.value.reason == "empty_response"


@pytest.mark.parametrize("response, reason", [("bad \udcff bytes", "non_utf8_response"),
                                              (None, "bad_response")])
def test_bad_responses_are_record_errors(stage, response, reason):
    with pytest.raises(RecordError) as info:
        stage(record(response))
    assert info.value.reason == reason


def test_ten_megabyte_response_is_counted_over_a_prefix(stage):
    text = "word " * 2_000_000
    kept = stage(record(text))[0]
    assert kept.quality["short"] == {"token_count": 13108, "token_count_truncated": True}


def test_prefix_count_falls_back_to_the_whole_text_when_it_cannot_decide():
    stage = ShortStage(ShortConfig(min_tokens=64, max_count_chars=100))
    assert stage.count("x" * 101) == (100, True)  # the 100-token prefix settles it
    stage = ShortStage(ShortConfig(min_tokens=64, max_count_chars=40))
    assert stage.count("x" * 60) == (60, False)  # a 40-token prefix cannot: the whole text is counted


def test_element_tasks_are_not_held_to_the_page_floor(stage):
    formula = record("x^{2}")
    formula.task = "transcribe_formula"
    assert stage(formula) == [formula] and formula.quality["short"] == {"skipped": "task transcribe_formula"}
    with pytest.raises(Dropped, match="short_response"):
        stage(record("x^{2}"))  # the same text as a page is too short
    everything = ShortStage(ShortConfig(tasks=("parse_page", "transcribe_formula")))
    with pytest.raises(Dropped, match="short_response"):
        everything(formula)


HEADINGS = {  # one heading, five scripts: each under the 64-token floor
    "en": "Chapter One. A short history of the old city, from its founding to the present day.",
    "zh": "第一章：这座古城从建城到今天的简要历史。",
    "ja": "第一章：この古い町の創設から現在までの短い歴史。",
    "th": "บทที่หนึ่ง: ประวัติศาสตร์ของเมืองนี้ตั้งแต่ก่อตั้งจนถึงปัจจุบัน",
    "hi": "अध्याय एक: शहर का इतिहास उसकी स्थापना से आज तक।",
}


@pytest.mark.parametrize("lang", sorted(HEADINGS))
def test_a_character_split_into_bytes_counts_at_most_one_token(stage, lang):
    text = HEADINGS[lang]
    assert stage._encode_len(text) > len(text) or lang == "en"  # the bundled tokenizer writes bytes
    n, _ = stage.count(text)
    assert n <= len(text)
    with pytest.raises(Dropped, match="short_response"):
        stage(record(text))


def test_cap_counts_characters_without_combining_marks_and_keeps_a_long_cjk_page(stage):
    assert stage.count("第一章：这座古城")[0] == 8  # "：" too is split into bytes
    assert stage.count("अध्याय")[0] == 4  # 6 code points, 2 of them vowel sign / virama
    assert stage.count("The 北京 office")[0] == stage._encode_len("The ") + 2 + stage._encode_len(" office")
    page = "本研究旨在探讨城市化进程对区域生态环境的影响，并提出相应的政策建议。我们收集了过去二十年的遥感数据。"
    assert len(page) >= 48 and stage.count(page * 2)[0] == len(page * 2)
    assert stage(record(page * 2))[0].quality["short"] == {"token_count": len(page * 2)}


def test_nfd_counts_as_nfc(stage):
    import unicodedata

    text = "L'été dernier, le café près de l'église était fermé à cause des rénovations."
    assert stage.count(unicodedata.normalize("NFD", text)) == stage.count(text)


def test_cap_split_chars_off_counts_as_the_tokenizer_does():
    raw = ShortStage(ShortConfig(cap_split_chars=False))
    assert raw.count(HEADINGS["ja"]) == (72, False)
    assert raw(record(HEADINGS["ja"]))[0].quality["short"] == {"token_count": 72}


def test_a_misspelt_task_is_refused_at_start_up_naming_the_known_ones(tmp_path, capsys):
    """A typo in `tasks` used to hold no record to the floor: the stage dropped nothing and said nothing."""
    from pipelines import stage as stage_cli
    from pipelines.clean.registry import stage_config
    from schemas.config import ConfigError

    with pytest.raises(ValueError, match=r"unknown tasks \['parse_pag'\]; known: parse_page, transcribe_table, "):
        ShortConfig(tasks=("parse_page", "parse_pag"))
    with pytest.raises(ConfigError, match=r"^clean\.stages\[0\]: unknown tasks \['parse_pag'\]"):
        stage_config({"name": "short", "tasks": ["parse_pag"]}, "clean.stages[0]")
    out = tmp_path / "out"
    assert stage_cli.main(["short", "--input", str(tmp_path / "in.parquet"), "--output", str(out),
                           "--set", "tasks=[parse_pag]"]) == 2
    assert "unknown tasks ['parse_pag']; known: parse_page" in capsys.readouterr().err
    assert not out.exists()
