"""Every language a team writes in (issue 52): each document's terms in its own language, a question read in its
script's language or in the knowledge base's, a knowledge base of Spanish and English documents, Chinese cut into
words, Polish found without its accents; an older knowledge base re-indexed (terms, not vectors) and kept on its
model until `ragvps reindex`."""

from __future__ import annotations

import json
from pathlib import Path

import psycopg

from ragvps import langs

ES = """# Vacaciones

Los empleados tienen derecho a veinticinco días de vacaciones pagadas al año. Las solicitudes se envían al jefe
directo con dos semanas de antelación y el departamento de personal las confirma por escrito.
"""
ES_EXPENSES = """# Gastos de viaje

Los gastos de viaje se reembolsan en un plazo de treinta días después de presentar los recibos originales al
departamento de contabilidad.
"""
EN = """# Holidays

Staff get twenty-five paid days of holiday per year. Requests go to the line manager two weeks ahead, and the
people team confirms them in writing.
"""
ZH = """# 报销

员工出差的交通费用和住宿费用在提交发票后三十天内报销。报销申请需要部门经理签字。
"""
ZH_OTHER = """# 年假

员工每年享有二十五天带薪年假，需要提前两周向直属上级申请。
"""
PL = """# Urlop

Pracownikom przysługuje dwadzieścia sześć dni płatnego urlopu wypoczynkowego w roku kalendarzowym. Wniosek składa
się przełożonemu z dwutygodniowym wyprzedzeniem.
"""


def write(folder: Path, **pages: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in pages.items():
        (folder / f"{name}.md").write_text(text, encoding="utf-8")
    return folder


def keyword_top(cli, question: str) -> str:
    hits = json.loads(cli("query", question, "--json", "--mode", "keyword", "--k", "3").stdout)
    return hits[0]["path"] if hits else ""


def rows(db_url: str, query: str) -> list[tuple]:
    with psycopg.connect(db_url) as conn:
        return conn.execute(query).fetchall()


def test_reading_a_text_by_its_language():
    assert langs.of_document(ES, "english") == langs.Reading("es", "spanish")
    assert langs.of_document(EN, "english") == langs.Reading("en", "english")
    assert langs.of_document(PL, "english") == langs.Reading("pl", "simple", "fold")
    assert langs.of_document(ZH, "english") == langs.Reading("zh", "simple", "jieba")
    assert langs.of_document(ES, "english", detect=False) == langs.Reading("en", "english")  # the override
    assert langs.of_document("12 34 56", "german") == langs.Reading("de", "german")  # no letters: the setting
    assert "报销" in langs.Reading("zh", "simple", "jieba").terms(ZH).split()
    assert langs.fold("Zażółć gęślą jaźń") == "zazolc gesla jazn"
    assert langs.bigrams("東京タワー", "ja").split() == ["東京", "京タ", "タワ", "ワー"]
    assert langs.of_question("哪个部门负责报销？") == "zh"
    assert langs.of_question("¿Cuántos días?") == ""  # Latin script: the knowledge base's languages


def test_a_knowledge_base_of_spanish_and_english_documents(cli, tmp_path, db_url):
    cli.env["RAGVPS_EMBEDDER"] = "multilingual"
    docs = write(tmp_path / "docs", vacaciones=ES, gastos=ES_EXPENSES, holidays=EN)
    cli("ingest", str(docs))
    assert sorted(rows(db_url, "SELECT source, language FROM documents")) == [
        ("gastos.md", "es"),
        ("holidays.md", "en"),
        ("vacaciones.md", "es"),
    ]
    assert sorted(rows(db_url, "SELECT language::text, chunks FROM chunk_languages")) == [
        ("english", 1),
        ("spanish", 2),
    ]
    # Spanish stems: `reembolsar` finds `reembolsan` (the english configuration keeps the two words apart)
    assert keyword_top(cli, "¿reembolsar?") == "gastos.md"
    assert keyword_top(cli, "solicitud de vacaciones") == "vacaciones.md"
    assert keyword_top(cli, "requesting holidays") == "holidays.md"  # English stems in the same knowledge base
    # the vector leg crosses languages: a Spanish question finds the Spanish page first, the English one next
    hits = json.loads(cli("query", "¿Cuántos días de vacaciones pagadas hay al año?", "--json", "--k", "3").stdout)
    assert hits[0]["path"] == "vacaciones.md" and "holidays.md" in [h["path"] for h in hits]


def test_chinese_is_cut_into_words_and_polish_found_without_accents(cli, tmp_path, db_url):
    cli.env["RAGVPS_EMBEDDER"] = "multilingual"
    docs = write(tmp_path / "docs", baoxiao=ZH, nianjia=ZH_OTHER, urlop=PL)
    cli("ingest", str(docs))
    assert keyword_top(cli, "出差费用怎么报销") == "baoxiao.md"
    assert keyword_top(cli, "年假需要提前多久申请") == "nianjia.md"
    assert keyword_top(cli, "ile dni platnego urlopu") == "urlop.md"  # typed without ł, ą
    assert keyword_top(cli, "ile dni płatnego urlopu") == "urlop.md"


def test_an_older_knowledge_base_reindexes_its_terms_not_its_vectors_and_keeps_its_model(cli, tmp_path, db_url):
    docs = write(tmp_path / "docs", vacaciones=ES, gastos=ES_EXPENSES, holidays=EN)
    cli("ingest", str(docs))  # embedder local (MiniLM), as the fixture sets it
    with psycopg.connect(db_url) as conn:  # as migration 014 leaves a knowledge base made before it
        conn.execute("UPDATE chunks SET language = 'english', terms = NULL")
        conn.execute("UPDATE documents SET language = NULL")
    table = rows(db_url, "SELECT table_name FROM embedding_sets WHERE active")[0][0]
    vectors = rows(db_url, f"SELECT chunk_id, embedding::text FROM {table} ORDER BY 1")
    assert keyword_top(cli, "¿reembolsar?") != "gastos.md"  # english reads reembolsar whole

    del cli.env["RAGVPS_EMBEDDER"]  # the default embedder now: the knowledge base keeps MiniLM
    again = json.loads(cli("ingest", str(docs), "--json").stdout)
    assert again["embedded"] == 0 and again["stored"] == 0
    assert sorted(rows(db_url, "SELECT language FROM documents")) == [("en",), ("es",), ("es",)]
    assert rows(db_url, f"SELECT chunk_id, embedding::text FROM {table} ORDER BY 1") == vectors  # untouched
    assert keyword_top(cli, "¿reembolsar?") == "gastos.md"
    assert rows(db_url, "SELECT model FROM embedding_sets WHERE active") == [("all-MiniLM-L6-v2-int8",)]

    switched = json.loads(cli("reindex", "--json").stdout)["switch"]  # reindex takes the default: USE
    assert (switched["old_model"], switched["new_model"]) == ("all-MiniLM-L6-v2-int8", "use-multilingual-v3")
    assert rows(db_url, "SELECT model, dims FROM embedding_sets WHERE active") == [("use-multilingual-v3", 512)]


def test_sentences_end_at_spanish_and_cjk_marks_and_not_after_their_abbreviations():
    from ragvps.text import sentences

    def split(text: str) -> list[str]:
        return [text[a:b] for a, b in sentences(text, 0, len(text))]

    assert split("¿Cuántos días hay? ¡Veinticinco! La Sra. García lo confirmó.") == [
        "¿Cuántos días hay?",
        "¡Veinticinco!",
        "La Sra. García lo confirmó.",
    ]
    assert split("Es así.¿Por qué? Porque sí.") == ["Es así.", "¿Por qué?", "Porque sí."]
    assert split("员工每年享有二十五天年假。需要提前两周申请！可以吗？可以。") == [
        "员工每年享有二十五天年假。",
        "需要提前两周申请！",
        "可以吗？",
        "可以。",
    ]
    assert split("Urlop trwa np. 26 dni. Wniosek składa się do kierownika.") == [
        "Urlop trwa np. 26 dni.",
        "Wniosek składa się do kierownika.",
    ]


def test_standard_score_fusion_lets_the_sure_leg_decide():
    from ragvps.retrieve import fusion

    # The keyword leg is sure of chunk 1 (far above its other candidates); the vector leg's candidates score alike
    # (a model weak in this language), chunk 1 not among them. Rank fusion puts 2, which both legs found, first;
    # standard scores follow the sure leg.
    keyword = [(1, 9.0)] + [(c, 2.0 - 0.05 * c) for c in range(2, 21)]
    vector = [(c, 0.41 - 0.01 * c) for c in range(2, 22)]
    assert fusion.rrf([[c for c, _ in vector], [c for c, _ in keyword]])[0][0] == 2
    fused = fusion.zscore([vector, keyword])
    assert fused[0][0] == 1
    assert fusion.fuse(vector, keyword, "zscore", 60, 1.0) == fused
    assert fusion.zscore([vector, []]) == fusion.zscore([vector])  # an empty leg counts for nothing


def test_the_model_s_own_vector_weight_multiplies_the_setting_s():
    from ragvps.backends import LOCAL_MODEL, USE_MODEL
    from ragvps.config import Settings
    from ragvps.retrieve import fusion, search

    keyword = [(1, 9.0)] + [(c, 2.0 - 0.05 * c) for c in range(2, 21)]
    vector = [(c, 0.9 - 0.02 * c) for c in range(2, 22)]
    settings = Settings.of(vector_weight=2.0)
    assert search.vector_scale(USE_MODEL) == 0.5 and search.vector_scale(LOCAL_MODEL) == 1.0
    assert search.vector_scale("a-model-ragvps-has-no-entry-for") == 1.0
    assert search.fuse(vector, keyword, settings, USE_MODEL) == fusion.zscore([vector, keyword], [1.0, 1.0])
    assert search.fuse(vector, keyword, settings, LOCAL_MODEL) == fusion.zscore([vector, keyword], [2.0, 1.0])
