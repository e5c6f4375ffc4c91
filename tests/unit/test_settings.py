"""Typed settings (pipeline/configuration/settings.py): every shipped config validates, the schema covers every key,
and hostile settings stop with one exact line naming the key, the value and what is allowed."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

import pytest
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf
from pydantic import Field

from ragtrack.core.errors import InputError, RagtrackError
from ragtrack.pipeline.configuration import settings
from ragtrack.pipeline.configuration.config import CONFIG_MODULE, compose
from ragtrack.pipeline.configuration.settings import absolute_inputs, settings_table, validate
from ragtrack.retrievers.base import RetrieverSettings

MULTI_SELECT = {"retriever", "rewriter", "fusion", "reranker", "evaluator"}
BASE = ["dataset=toy", "encoder=hashing", "paths.output_dir=/tmp/out"]


def composed(overrides: list[str], config_dir: Path | None = None, base: list[str] = BASE):
    GlobalHydra.instance().clear()
    return compose([*base, *overrides], config_dir)


def group_options() -> list[str]:
    """One override per option of every shipped group (hydra/ is Hydra's own, checked by Hydra)."""
    conf = Path(str(files(CONFIG_MODULE)))
    overrides = []
    for group in sorted(p for p in conf.iterdir() if p.is_dir() and p.name not in {"hydra", "local", "__pycache__"}):
        for option in sorted(group.glob("*.yaml")):
            name = option.stem
            overrides.append(f"{group.name}=[{name}]" if group.name in MULTI_SELECT else f"{group.name}={name}")
    return overrides


GIVEN_VALUES = {
    "dataset=beir": ["dataset.path=/data/x"],
    "dataset=irds": ["dataset.id=beir/scifact/test"],
    "experiment=beir_irds": ["dataset.id=beir/scifact/test"],  # a sweep gives it (hydra.sweeper.params)
    "dataset=trec": ["dataset.corpus=c.tsv", "dataset.topics=t.tsv", "dataset.qrels=q.txt"],
    "generator=openai": ["generator.model=m"],
    "evaluator=[llm_judge]": ["evaluator.llm_judge.model=m"],
    "evaluator=[pairwise_judge]": ["evaluator.pairwise_judge.model=m"],
    "evaluator=[nuggets]": ["evaluator.nuggets.model=m"],
    "experiment=qa_xquad_cited": ["generator.model=m"],
    "rewriter=[llm]": ["rewriter.llm.model=m"],
    "reranker=[llm]": ["reranker.llm.model=m"],
    "hparams_search=rrf_optuna": ["fusion.rrf.weights=[1.0,0.5]"],
    "retriever=[run_file]": ["retriever.run_file.path=a.trec"],
}


@pytest.mark.parametrize("override", group_options())
def test_every_shipped_option_and_preset_validates(override: str) -> None:
    """A key added to a shipped YAML without a schema entry fails here as 'X: no such key'."""
    extra = GIVEN_VALUES.get(override, [])
    if override.startswith("fusion="):  # a fusion needs both members
        extra = [*extra, "retriever=[bm25,dense]"]
    if override.startswith("retriever="):  # one retriever: nothing to fuse
        extra = [*extra, "fusion=[]"]
    validate(
        composed([override, *extra], base=["paths.output_dir=/tmp/out"])
    )  # presets pick their own dataset and encoder


def test_the_default_job_validates() -> None:
    validate(composed([]))
    GlobalHydra.instance().clear()
    validate(compose(["paths.output_dir=/tmp/out"]))  # the default encoder (ONNX), SciFact


def test_the_table_in_the_docs_is_the_schema() -> None:
    """docs/configuration.md holds the table ``python -m ragtrack.pipeline.configuration.settings`` prints."""
    docs = (Path(__file__).parents[2] / "docs" / "configuration.md").read_text()
    assert settings_table() in docs, (
        "regenerate the table in docs/configuration.md: python -m ragtrack.pipeline.configuration.settings"
    )


def test_the_table_names_every_key_of_every_shipped_option() -> None:
    table = settings_table()
    for key in (
        "`depth`",
        "`fusion.rrf.k`",
        "`retriever.bm25.tokenizer.stemmer`",
        "`retriever.dense.chroma.hnsw.ef_search`",
        "`encoder.dim`",
        "`evaluator.llm_judge.api_key_env`",
        "`chunking.overlap`",
        "`tracking.key_metrics`",
        "`paths.cache_dir`",
    ):
        assert key in table
    assert "| `retriever.bm25.b` | `type: bm25` | a finite number in [0, 1] |" in table


# (overrides, the exact message); each is composed on top of BASE (the toy dataset, the hashing encoder)
HOSTILE = {
    "depth negative": (["depth=-1"], "depth: -1 is not allowed: an integer >= 1"),
    "depth zero": (["depth=0"], "depth: 0 is not allowed: an integer >= 1"),
    "depth text": (["depth=abc"], "depth: 'abc' is not allowed: an integer >= 1"),
    "depth fraction": (["depth=2.5"], "depth: 2.5 is not allowed: an integer >= 1"),
    "depth bool": (["depth=true"], "depth: true is not allowed: an integer >= 1"),
    "depth quoted number": (["depth='10'"], "depth: '10' is not allowed: an integer >= 1"),
    "depth null": (["depth=null"], "depth: null is not allowed: an integer >= 1"),
    "seed negative": (["seed=-1"], "seed: -1 is not allowed: an integer >= 0"),
    "chroma build unknown": (
        ["retriever.dense.chroma.build=never"],
        "retriever.dense.chroma.build: 'never' is not allowed: one of when_used, always",
    ),
    "seed float": (["seed=1.5"], "seed: 1.5 is not allowed: an integer >= 0"),
    "rrf k text": (["fusion.rrf.k=abc"], "fusion.rrf.k: 'abc' is not allowed: a finite number >= 0"),
    "rrf k negative": (["fusion.rrf.k=-1"], "fusion.rrf.k: -1 is not allowed: a finite number >= 0"),
    "rrf k inf": (["fusion.rrf.k=inf"], "fusion.rrf.k: inf is not allowed: a finite number >= 0"),
    "rrf depth zero": (["fusion.rrf.depth=0"], "fusion.rrf.depth: 0 is not allowed: an integer >= 1"),
    "rrf weights nan": (
        ["fusion.rrf.weights=[nan,1.0]"],
        "fusion.rrf.weights[0]: nan is not allowed: a finite number >= 0",
    ),
    "rrf weights negative": (
        ["fusion.rrf.weights=[1.0,-0.5]"],
        "fusion.rrf.weights[1]: -0.5 is not allowed: a finite number >= 0",
    ),
    "rrf weights count": (
        ["fusion.rrf.weights=[1.0]"],
        "fusion.rrf.weights: [1.0] is not allowed: null or one weight per member (2: bm25, dense)",
    ),
    "rrf misspelled key": (["+fusion.rrf.kk=3"], "fusion.rrf.kk: no such key; did you mean 'fusion.rrf.k'?"),
    "rrf unknown key": (
        ["+fusion.rrf.zzz=3"],
        "fusion.rrf.zzz: no such key; known: type, _target_, alias, system, members, depth, weights, k",
    ),
    "rrf not a mapping": (["fusion.rrf=3"], "fusion.rrf: 3 is not allowed: a mapping"),
    "fusion member not retrieved": (
        ["retriever=[bm25]"],
        "fusion.rrf.members[1]: 'dense' is not allowed: a system of this job (bm25)",
    ),
    "fusion member misspelled": (
        ["fusion.rrf.members=[bm25,dnese]"],
        "fusion.rrf.members[1]: 'dnese' is not allowed: a system of this job (bm25, dense); did you mean 'dense'?",
    ),
    "fusion system clash": (
        ["fusion.rrf.system=bm25"],
        "fusion.rrf.system: 'bm25' is not allowed: a name no other system has (retriever.bm25 makes 'bm25')",
    ),
    "fusion system path": (
        ["fusion.rrf.system=../x"],
        "fusion.rrf.system: '../x' is not allowed: a system name (letters, digits, _ . + -, starting with a letter or digit; at most 100 characters)",
    ),
    "linear weights zero sum": (
        ["fusion=[linear]", "fusion.linear.weights=[0,0]"],
        "fusion.linear.weights: [0, 0] is not allowed: weights >= 0 with a positive sum",
    ),
    "normalization unknown": (
        ["fusion=[combsum]", "fusion.combsum.normalization=l2"],
        "fusion.combsum.normalization: 'l2' is not allowed: one of none, minmax, zscore, max, sum, rank, borda, minmax-inverted",
    ),
    "bm25 k1 negative": (["retriever.bm25.k1=-3"], "retriever.bm25.k1: -3 is not allowed: a finite number >= 0"),
    "bm25 b above 1": (["retriever.bm25.b=1.5"], "retriever.bm25.b: 1.5 is not allowed: a finite number in [0, 1]"),
    "bm25 b nan": (["retriever.bm25.b=nan"], "retriever.bm25.b: nan is not allowed: a finite number in [0, 1]"),
    "bm25 backend": (
        ["retriever.bm25.backend=lucine"],
        "retriever.bm25.backend: 'lucine' is not allowed: one of lucene, bm25s, rank_bm25",
    ),
    "bm25 fields on bm25s": (
        ["retriever.bm25.backend=bm25s", "retriever.bm25.fields={title:1.0}"],
        "retriever.bm25: fields needs backend lucene (this retriever: backend bm25s)",
    ),
    "bm25 field unknown": (
        ["retriever.bm25.fields={abstract:1.0}"],
        "retriever.bm25.fields.abstract: 'abstract' is not allowed: one of title, text",
    ),
    "bm25 pattern with lucene": (
        ["retriever.bm25.tokenizer.pattern=\\w+"],
        "retriever.bm25.tokenizer: pattern applies to analyzer regex only (analyzer lucene splits text by Unicode's word rules)",
    ),
    "bm25 misspelled type": (
        ["retriever.bm25.type=bm52"],
        "retriever.bm25.type: 'bm52' is not allowed: one of bm25, dense, run_file (the installed retrievers); did you mean 'bm25'?",
    ),
    "bm25 stemmer misspelled": (
        ["retriever.bm25.tokenizer.stemmer=englsh"],
        "retriever.bm25.tokenizer.stemmer: 'englsh' is not allowed: lucene, a PyStemmer language (one of 36, e.g. english) or null; did you mean 'english'?",
    ),
    "bm25 lowercase text": (
        ["retriever.bm25.tokenizer.lowercase=yes"],
        "retriever.bm25.tokenizer.lowercase: 'yes' is not allowed: true or false",
    ),
    "bm25 unicode form": (
        ["retriever.bm25.tokenizer.normalize=nfd"],
        "retriever.bm25.tokenizer.normalize: 'nfd' is not allowed: one of nfkc, nfc, none",
    ),
    "encoder dim zero": (["encoder.dim=0"], "encoder.dim: 0 is not allowed: an integer >= 1"),
    "onnx batch zero": (
        ["encoder=minilm_onnx", "encoder.batch_size=0"],
        "encoder.batch_size: 0 is not allowed: an integer >= 1 or null",
    ),
    "onnx precision": (
        ["encoder=minilm_onnx", "encoder.precision=fp8"],
        "encoder.precision: 'fp8' is not allowed: one of fp32, int8, fp16, bf16",
    ),
    "chroma port": (
        ["retriever.dense.chroma.port=0"],
        "retriever.dense.chroma.port: 0 is not allowed: an integer in [1, 65535]",
    ),
    "chroma mode": (
        ["retriever.dense.chroma.mode=cloud"],
        "retriever.dense.chroma.mode: 'cloud' is not allowed: one of persistent, http",
    ),
    "hnsw zero": (
        ["retriever.dense.chroma.hnsw.ef_search=0"],
        "retriever.dense.chroma.hnsw.ef_search: 0 is not allowed: an integer >= 1",
    ),
    "metric misspelled": (
        ["evaluator.ranking.metrics=[ndcg@10,ndgc@5]"],
        "evaluator.ranking.metrics[1]: 'ndgc@5' is not allowed: a metric of the 'ranking' evaluator (ragtrack metrics lists them); did you mean 'ndcg@5'?",
    ),
    "metric zero cutoff": (
        ["evaluator.ranking.metrics=[ndcg@0]"],
        "evaluator.ranking.metrics[0]: 'ndcg@0' is not allowed: a cutoff that is an integer >= 1, e.g. ndcg@10",
    ),
    "metrics empty": (
        ["evaluator.ranking.metrics=[]"],
        "evaluator.ranking.metrics: [] is not allowed: a non-empty list, each a metric name (ragtrack metrics lists them) or null",
    ),
    "relevance threshold negative": (
        ["evaluator.ranking.relevance_threshold=-1"],
        "evaluator.ranking.relevance_threshold: -1 is not allowed: an integer >= 0",
    ),
    "chunk size zero": (["chunking=tokens", "chunking.size=0"], "chunking.size: 0 is not allowed: an integer >= 1"),
    "chunk overlap too big": (
        ["chunking=tokens", "chunking.overlap=200"],
        "chunking.overlap: 200 is not allowed: an integer below size (128), or a fraction of size in (0, 1)",
    ),
    "chunk oversample zero": (
        ["chunking=sentences", "chunking.oversample=0"],
        "chunking.oversample: 0 is not allowed: an integer >= 1",
    ),
    "generator model missing": (["generator=openai"], "generator.model: a value is required (the config has ???)"),
    "generator key pasted as env name": (
        ["generator=openai", "generator.model=m", "generator.api_key_env=sk-live-1234"],
        "generator.api_key_env: the value given (not shown) is not allowed: "
        "the NAME of an environment variable (letters, digits, _), e.g. OPENAI_API_KEY or null",
    ),
    "generator timeout zero": (
        ["generator=openai", "generator.model=m", "generator.timeout=0"],
        "generator.timeout: 0 is not allowed: a finite number > 0",
    ),
    "generator url": (
        ["generator=openai", "generator.model=m", "generator.base_url=localhost:8000"],
        "generator.base_url: 'localhost:8000' is not allowed: an http:// or https:// URL",
    ),
    "extractive unit": (
        ["generator=extractive", "generator.unit=word"],
        "generator.unit: 'word' is not allowed: one of span, sentence",
    ),
    "dataset name leaves the folder": (
        ["dataset.name=x/../../.."],
        "dataset.name: 'x/../../..' is not allowed: a dataset name "
        "(no / or \\ or control characters, not . or ..; at most 100 characters: it names folders and the MLflow experiment), or null: named after its source",
    ),
    "dataset name parent": (
        ["dataset.name=.."],
        "dataset.name: '..' is not allowed: a dataset name "
        "(no / or \\ or control characters, not . or ..; at most 100 characters: it names folders and the MLflow experiment), or null: named after its source",
    ),
    "dataset path missing": (["dataset=beir"], "dataset.path: a value is required (the config has ???)"),
    "dataset misspelled key": (["+dataset.nme=x"], "dataset.nme: no such key; did you mean 'dataset.name'?"),
    "top-level misspelled key": (["+depht=10"], "depht: no such key; did you mean 'depth'?"),
    "unresolvable interpolation": (
        ["depth=${nope}"],
        "depth: cannot resolve '${nope}': Interpolation key 'nope' not found",
    ),
    "tracking key metrics empty": (
        ["tracking.key_metrics=[]"],
        "tracking.key_metrics: [] is not allowed: a non-empty list, each a metric name (ragtrack metrics lists them) or null",
    ),
    "tracking enabled text": (["tracking.enabled=maybe"], "tracking.enabled: 'maybe' is not allowed: true or false"),
    "optimize metric shape": (
        ["optimize_metric=ndcg@10"],
        "optimize_metric: 'ndcg@10' is not allowed: '<system>/<metric>', e.g. hybrid/ndcg@10 or null",
    ),
    "reranker input unknown": (
        ["reranker=[cross_encoder]", "reranker.cross_encoder.input=bm52"],
        "reranker.cross_encoder.input: 'bm52' is not allowed: a system of this job (bm25, dense, hybrid); did you mean 'bm25'?",
    ),
    "reranker depth zero": (
        ["reranker=[cross_encoder]", "reranker.cross_encoder.depth=0"],
        "reranker.cross_encoder.depth: 0 is not allowed: an integer >= 1",
    ),
    "reranker depth negative": (
        ["reranker=[cross_encoder]", "reranker.cross_encoder.depth=-5"],
        "reranker.cross_encoder.depth: -5 is not allowed: an integer >= 1",
    ),
    "reranker model empty": (
        ["reranker=[cross_encoder]", "reranker.cross_encoder.model=''"],
        "reranker.cross_encoder.model: '' is not allowed: a non-empty string",
    ),
    "reranker batch zero": (
        ["reranker=[cross_encoder]", "reranker.cross_encoder.batch_size=0"],
        "reranker.cross_encoder.batch_size: 0 is not allowed: an integer >= 1",
    ),
    "reranker system clash": (
        ["reranker=[cross_encoder]", "reranker.cross_encoder.system=hybrid"],
        "reranker.cross_encoder.system: 'hybrid' is not allowed: a name no other system has (fusion.rrf makes 'hybrid')",
    ),
    "reranker system clashes in MLflow": (
        [
            "reranker=[cross_encoder]",
            "reranker.cross_encoder.system=bm25_cross_encoder",
            "reranker=[cross_encoder,llm]",
            "reranker.llm.model=m",
            "reranker.llm.system=bm25+cross_encoder",
        ],
        "reranker.llm.system: 'bm25+cross_encoder' is not allowed: a name no other system has "
        "(reranker.cross_encoder makes 'bm25_cross_encoder')",
    ),
    "rerankers in a cycle": (
        [
            "reranker=[cross_encoder,llm]",
            "reranker.llm.model=m",
            "reranker.cross_encoder.system=a",
            "reranker.cross_encoder.input=b",
            "reranker.llm.system=b",
            "reranker.llm.input=a",
        ],
        "reranker.cross_encoder: the systems a -> b read each other in a cycle: a system may read only systems made before it",
    ),
    "fusion of itself": (
        ["fusion.rrf.members=[bm25,hybrid]"],
        "fusion.rrf: the systems hybrid read each other in a cycle: a system may read only systems made before it",
    ),
    "rewriter input unknown": (
        ["rewriter=[rm3]", "rewriter.rm3.input=bm"],
        "rewriter.rm3.input: 'bm' is not allowed: a system of this job (bm25, dense, hybrid); did you mean 'bm25'?",
    ),
    "rm3 weight above 1": (
        ["rewriter=[rm3]", "rewriter.rm3.original_query_weight=1.5"],
        "rewriter.rm3.original_query_weight: 1.5 is not allowed: a finite number in [0, 1]",
    ),
    "rm3 fb_docs zero": (
        ["rewriter=[rm3]", "rewriter.rm3.fb_docs=0"],
        "rewriter.rm3.fb_docs: 0 is not allowed: an integer >= 1",
    ),
    "llm reranker mode": (
        ["reranker=[llm]", "reranker.llm.model=m", "reranker.llm.mode=pairwise"],
        "reranker.llm.mode: 'pairwise' is not allowed: one of pointwise, listwise",
    ),
    "fusion member twice": (
        ["fusion.rrf.members=[bm25,dense,bm25]"],
        "fusion.rrf.members[2]: 'bm25' is not allowed: a member given once ('bm25' is members[0])",
    ),
    "fusion deeper than the job": (
        ["depth=5", "fusion.rrf.depth=1000"],
        "fusion.rrf.depth: 1000 is not allowed: at most the job's depth (5), the documents each system returns",
    ),
    "api key variable unset": (
        ["generator=openai", "generator.model=m", "generator.api_key_env=RAGTRACK_TEST_UNSET_KEY"],
        "generator.api_key_env: the environment variable RAGTRACK_TEST_UNSET_KEY is not set "
        "(export RAGTRACK_TEST_UNSET_KEY=... before the run)",
    ),
    "key metric not scored": (
        ["tracking.key_metrics=[ndcg@10,recall@1000]"],
        "tracking.key_metrics[1]: 'recall@1000' is not allowed: a metric this job scores; add it to evaluator.ranking.metrics",
    ),
    "rm3 over a dense input": (
        ["rewriter=[rm3]", "rewriter.rm3.input=dense"],
        "rewriter.rm3.input: 'dense' is not allowed: a BM25 retriever (RM3 expands queries with its index's terms); "
        "dense is a DenseRetriever",
    ),
    "rewriter over a fusion": (
        ["rewriter=[llm]", "rewriter.llm.model=m", "rewriter.llm.input=hybrid"],
        "rewriter.llm.input: 'hybrid' is not allowed: a retriever that searches query texts (a rewriter searches "
        "its input with the rewritten queries); hybrid is a RRF",
    ),
    "rewriter over a run file": (
        [
            "retriever=[run_file]",
            "retriever.run_file.path=x.trec",
            "fusion=[]",
            "rewriter=[llm]",
            "rewriter.llm.model=m",
            "rewriter.llm.input=run_file",
        ],
        "rewriter.llm.input: 'run_file' is not allowed: a retriever that searches query texts (a rewriter searches "
        "its input with the rewritten queries); run_file is a RunFileRetriever",
    ),
    "system name too long": (
        ["fusion.rrf.system=" + "h" * 101],
        f"fusion.rrf.system: {'h' * 101!r} is not allowed: a system name (letters, digits, _ . + -, starting with a "
        "letter or digit; at most 100 characters)",
    ),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_hostile_setting_is_one_exact_line(case: str) -> None:
    overrides, message = HOSTILE[case]
    with pytest.raises(InputError) as caught:
        validate(composed(overrides))
    assert str(caught.value) == message
    assert "\n" not in message and "sk-live" not in str(caught.value)


# Hydra's own composition errors (raised before a job starts), as the same kind of line
COMPOSITION = {
    "misspelled key": (["fusion.rrf.kk=3"], "fusion.rrf.kk: no such key; did you mean 'fusion.rrf.k'?"),
    "misspelled nested key": (
        ["retriever.bm25.tokenizer.stemer=null"],
        "retriever.bm25.tokenizer.stemer: no such key; did you mean 'retriever.bm25.tokenizer.stemmer'?",
    ),
    "misspelled top-level key": (["depht=3"], "depht: no such key; did you mean 'depth'?"),
    "key of an unselected component": (
        ["fusion=[]", "fusion.rrf.k=3"],
        "fusion.rrf.k: no such key (fusion is not set in this config)",
    ),
    "misspelled option": (
        ["retriever=bm52"],
        "retriever: 'bm52' is not allowed: one of bm25, bm25_multifield, dense, run_file; did you mean 'bm25'?",
    ),
    "misspelled option in a list": (
        ["retriever=[bm25,dnese]"],
        "retriever: 'dnese' is not allowed: one of bm25, bm25_multifield, dense, run_file; did you mean 'dense'?",
    ),
    "misspelled encoder": (
        ["encoder=minilmm"],
        "encoder: 'minilmm' is not allowed: one of hashing, minilm, minilm_onnx, minilm_onnx_int8; did you mean 'minilm'?",
    ),
    "unknown preset": (
        ["experiment=nothing_like_it"],
        "experiment: 'nothing_like_it' is not allowed: one of beir, beir_irds, bm25_params, chunk_size, compare_retrievers, "
        "depth, embedding_models, fusion_methods, qa_xquad, qa_xquad_cited, query_robustness, rrf_k, rrf_k_tuned "
        "(your own: --config-dir DIR with DIR/experiment/nothing_like_it.yaml)",
    ),
    "override that does not parse": (
        ["depth=[1,"],
        "depth=[1,: not a valid override: no viable alternative at input '[1,'",
    ),
}


@pytest.mark.parametrize("case", list(COMPOSITION))
def test_a_composition_error_is_one_exact_line(case: str) -> None:
    overrides, message = COMPOSITION[case]
    with pytest.raises(RagtrackError) as caught:
        composed(overrides)
    assert str(caught.value) == message


def test_user_config_dirs_count_for_options(tmp_path: Path) -> None:
    (tmp_path / "retriever").mkdir()
    (tmp_path / "retriever" / "my_bm25.yaml").write_text("my_bm25:\n  type: bm25\n  k1: 1.2\n")
    with pytest.raises(
        RagtrackError,
        match=r"^retriever: 'my_bm52' is not allowed: one of bm25, bm25_multifield, dense, my_bm25, run_file; did you mean 'my_bm25'\?$",
    ):
        composed(["retriever=[my_bm52]"], tmp_path)
    validate(composed(["retriever=[my_bm25]", "fusion=[]"], tmp_path))


def test_a_plugin_component_is_checked_on_the_common_keys_or_its_own_schema(monkeypatch) -> None:
    """A type ragtrack does not ship: its own keys are free unless its entry point declares ``settings_schema``."""
    from ragtrack.pipeline import registry

    class Splade:
        pass

    class Entry:
        value = "my_package:Splade"

        def load(self):
            return Splade

    installed, load = registry.installed, registry.load
    monkeypatch.setattr(
        registry, "installed", lambda group: {"splade": Entry()} if group == "retrievers" else installed(group)
    )
    monkeypatch.setattr(registry, "load", lambda group, name: Splade if group == "retrievers" else load(group, name))
    plugin = {"type": "splade", "model": "naver/splade", "batch": 16}
    validate({**_job(), "retriever": {"splade": plugin}})

    class SpladeSettings(RetrieverSettings, extra="forbid"):
        model: str
        batch: int = Field(16, ge=1, strict=True)

    Splade.settings_schema = SpladeSettings
    validate({**_job(), "retriever": {"splade": plugin}})
    with pytest.raises(InputError, match=r"^retriever\.splade\.batch: 0 is not allowed: an integer >= 1$"):
        validate({**_job(), "retriever": {"splade": {**plugin, "batch": 0}}})
    with pytest.raises(
        InputError,
        match=r"^retriever\.splade\.type: 'spalde' is not allowed: one of .*splade.*; did you mean 'splade'\?$",
    ):
        validate({**_job(), "retriever": {"splade": {**plugin, "type": "spalde"}}})


def test_an_unshipped_target_is_checked_on_the_common_keys() -> None:
    validate({**_job(), "encoder": {"_target_": "my_package.MyEncoder", "anything": [1, 2]}})
    validate({**_job(), "retriever": {"mine": {"_target_": "my_package.MyRetriever", "alpha": 0.3}}})
    with pytest.raises(InputError, match=r"^retriever\.mine\.type: a value is required: one of bm25, dense"):
        validate({**_job(), "retriever": {"mine": {"alpha": 0.3}}})


def test_a_derived_system_name_too_long_for_mlflow_is_refused_before_anything_runs() -> None:
    from ragtrack.pipeline.configuration.systems import plan_systems

    long = "b" * 98
    with pytest.raises(
        InputError, match=r"^reranker\.ce\.system: a system name of 101 characters is not allowed: at most 100 "
    ):
        plan_systems(
            {"retriever": {long: {"type": "bm25"}}, "reranker": {"ce": {"type": "cross_encoder", "input": long}}}
        )
    with pytest.raises(InputError, match=r"^retriever\.b+: a system name of 101 characters"):
        plan_systems({"retriever": {long + "bbb": {"type": "bm25"}}})


def test_systems_are_ordered_by_what_they_read() -> None:
    """A fusion may read a reranker and a reranker a fusion: each system runs after its inputs, else in config order."""
    from ragtrack.pipeline.configuration.systems import plan_systems

    cfg = composed(
        [
            "rewriter=[rm3]",
            "reranker=[cross_encoder]",
            "reranker.cross_encoder.input=hybrid",
            "fusion.rrf.members=[bm25+rm3,dense]",
        ]
    )
    validate(cfg)
    assert [s.name for s in plan_systems(cfg)] == ["bm25", "dense", "bm25+rm3", "hybrid", "hybrid+cross_encoder"]
    assert [s.inputs for s in plan_systems(cfg)][-2:] == [["bm25+rm3", "dense"], ["hybrid"]]


def test_a_preset_helper_variable_goes_under_vars() -> None:
    validate({**_job(), "vars": {"bm25_weight": 0.7}})


def _job() -> dict:
    paths = {k: "/tmp/x" for k in ("root_dir", "data_dir", "log_dir", "output_dir", "cache_dir", "mlflow_dir")}
    return {
        "depth": 10,
        "seed": 0,
        "paths": paths,
        "dataset": {"type": "beir", "name": "toy", "path": "/tmp/toy"},
        "tracking": {"enabled": False},
    }


def test_discard_job_folder_removes_only_what_hydra_made(tmp_path: Path) -> None:
    log_dir = tmp_path / "outputs"
    job = log_dir / "runs" / "2026-01-01_00-00-00"
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "config.yaml").write_text("depth: -1\n")
    (job / "ragtrack.log").write_text("")
    settings.discard_job_folder(job, "ragtrack", log_dir)
    assert not log_dir.exists() and tmp_path.exists()
    (job / ".hydra").mkdir(parents=True)
    (job / "results.json").write_text("{}")  # a folder the user reused (hydra.run.dir=...) is kept
    settings.discard_job_folder(job, "ragtrack", log_dir)
    assert (job / "results.json").is_file()


def test_the_python_api_checks_settings_before_it_makes_a_folder(tmp_path: Path) -> None:
    import ragtrack

    GlobalHydra.instance().clear()
    with pytest.raises(InputError, match=r"^depth: 0 is not allowed: an integer >= 1$"):
        ragtrack.run_experiment(["dataset=toy", "encoder=hashing", f"paths.root_dir={tmp_path}", "depth=0"])
    with pytest.raises(RagtrackError, match=r"^fusion\.rrf\.kk: no such key; did you mean 'fusion\.rrf\.k'\?$"):
        ragtrack.run_experiment(["dataset=toy", "encoder=hashing", f"paths.root_dir={tmp_path}", "fusion.rrf.kk=3"])
    assert list(tmp_path.iterdir()) == []


def _shipped_component_configs() -> list[tuple[str, dict, type]]:
    """(file:key, the YAML's mapping, the model it is checked on) for every component config ragtrack ships."""
    from omegaconf import OmegaConf

    from ragtrack.core.stage_kinds import STAGE_KINDS
    from ragtrack.pipeline.configuration.settings import _component_model, _encoder_model

    conf = Path(str(files(CONFIG_MODULE)))
    found = []
    for section, group in {
        **{kind.section: kind.group for kind in STAGE_KINDS},
        "evaluator": "evaluators",
        "generator": "generators",
        "chunking": "chunkers",
    }.items():
        for path in sorted((conf / section).glob("*.yaml")):
            raw = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
            nodes = raw.items() if section not in ("generator", "chunking") else [(path.stem, raw)]
            found += [(f"{section}/{path.name}:{key}", node, _component_model(group, node, key)) for key, node in nodes]
    for path in sorted((conf / "encoder").glob("*.yaml")):
        raw = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
        if "defaults" not in raw:  # a variant of another option (minilm_onnx_int8: minilm_onnx with int8 weights)
            found.append((f"encoder/{path.name}", raw, _encoder_model(raw, "encoder")))
    return found


PRESET_VALUES = {  # a shipped component preset differs from its model's defaults only here
    "retriever/bm25_multifield.yaml:bm25_multifield.fields": {"title": 1.0, "text": 1.0},
}


def _default_differences(model: type, node: dict, where: str, defaults=None) -> list[str]:
    """Where a shipped YAML and its model disagree: a model key the YAML lacks (users could not override it
    without '+'), or a value other than the model's default (interpolations and ??? are the job's to fill).
    ``defaults``: a nested block's default instance, whose values are the defaults of its keys."""
    from pydantic import BaseModel
    from pydantic_core import PydanticUndefined

    from ragtrack.pipeline import registry

    problems = []
    for name, info in model.model_fields.items():
        key = info.alias or name
        if key in ("type", "_target_"):
            continue
        if key not in node:
            problems.append(f"{where}.{key}: declared by {model.__name__}, missing from the YAML")
            continue
        value = node[key]
        if isinstance(value, str) and ("${" in value or value == "???"):
            continue
        declared = getattr(defaults, name) if defaults is not None else info.get_default(call_default_factory=True)
        default = PRESET_VALUES.get(f"{where}.{key}", declared)
        if key == "metrics" and default is None and isinstance(value, list):  # null: the evaluator's default_metrics()
            default = registry.load("evaluators", node["type"])().default_metrics()
        if default is PydanticUndefined:
            continue
        if isinstance(default, BaseModel):
            problems += _default_differences(type(default), value, f"{where}.{key}", default)
        elif value != default:
            problems.append(f"{where}.{key}: the YAML has {value!r}, {model.__name__} declares {default!r}")
    return problems


def test_every_shipped_yaml_holds_exactly_its_models_defaults() -> None:
    """The settings model beside each component is the one home of its defaults: every shipped YAML lists
    every key of its model with the model's default (presets override them in experiment/ files)."""
    configs = _shipped_component_configs()
    assert len(configs) >= 25 and {model.__name__ for _, _, model in configs} >= {
        "BM25Settings",
        "RRFSettings",
        "CrossEncoderSettings",
        "RM3Settings",
    }
    problems = [problem for where, node, model in configs for problem in _default_differences(model, node, where)]
    assert problems == []


def test_relative_input_paths_are_made_absolute_against_the_working_folder(tmp_path: Path, monkeypatch) -> None:
    """Every setting typed InputPath becomes absolute (config.yaml then names the same files from any
    folder); a NameOrPath stays a name unless such a file or folder exists; absolute paths and
    interpolations that resolve to absolute paths are left as written."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "models" / "mine").mkdir(parents=True)
    (tmp_path / "strict.yaml").write_text("name: strict\n")
    cfg = composed(
        [
            "dataset=trec",
            "dataset.corpus=c.tsv",
            "dataset.topics=sub/t.tsv",
            "dataset.qrels=../q.txt",
            "dataset.slices_file=s.tsv",
            "encoder=minilm",
            "encoder.model=models/mine",
            "+evaluator=[llm_judge]",
            "evaluator.llm_judge.model=m",
            "evaluator.llm_judge.human_labels=labels.jsonl",
            "evaluator.llm_judge.rubrics=[correctness,strict.yaml]",
            "+retriever.run.type=run_file",
            "+retriever.run.path=runs/a.trec",
        ]
    )
    absolute_inputs(cfg, validate(cfg))
    assert cfg.dataset.corpus == str(tmp_path / "c.tsv") and cfg.dataset.topics == str(tmp_path / "sub" / "t.tsv")
    assert cfg.dataset.qrels == str(tmp_path / ".." / "q.txt") and cfg.dataset.slices_file == str(tmp_path / "s.tsv")
    assert cfg.encoder.model == str(tmp_path / "models" / "mine")
    assert cfg.evaluator.llm_judge.human_labels == str(tmp_path / "labels.jsonl")
    assert list(cfg.evaluator.llm_judge.rubrics) == ["correctness", str(tmp_path / "strict.yaml")]
    assert cfg.retriever.run.path == str(tmp_path / "runs" / "a.trec")
    cfg = composed(["encoder=minilm", "+reranker=[cross_encoder]"])
    absolute_inputs(cfg, validate(cfg))  # hub names and the shipped dataset's interpolated path stay as they were
    assert (
        cfg.encoder.model == "all-MiniLM-L6-v2"
        and cfg.reranker.cross_encoder.model == "cross-encoder/ms-marco-MiniLM-L-6-v2"
    )
    assert OmegaConf.to_container(cfg.dataset)["path"].startswith("${")


def test_a_cutoff_past_the_job_depth_is_warned_once(caplog) -> None:
    from ragtrack.pipeline.execution.executor import warn_cutoffs_past_depth

    warn_cutoffs_past_depth(composed(["depth=10", "evaluator.ranking.metrics=[ndcg@10,recall@100,mrr,map@11]"]), 10)
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        "depth 10 is below the cutoff of recall@100, map@11: no system returns more than 10 documents, so each equals its value at 10"
    ]
    caplog.clear()
    warn_cutoffs_past_depth(composed([]), 100)  # the shipped metrics at the shipped depth
    assert not caplog.records


def test_a_sweep_is_checked_job_by_job_before_it_runs() -> None:
    """check_sweep composes and checks each job of the sweep (settings that read paths.output_dir, such
    as the citations evaluator's, included); the first bad job is named by its swept values."""
    from ragtrack.pipeline.configuration.config import check_sweep, sweep_jobs

    GlobalHydra.instance().clear()
    shared = ["experiment=qa_xquad_cited", "generator.model=m", "encoder=hashing"]
    assert sweep_jobs([*shared, "fusion.rrf.k=10,60", "depth=range(50,150,50)"]) == (
        shared,
        [[f"fusion.rrf.k={k}", f"depth={d}"] for k in (10, 60) for d in (50, 100)],
    )
    check_sweep([*shared, "fusion.rrf.k=10,60"])
    with pytest.raises(
        RagtrackError,
        match=r"^the sweep's job fusion\.rrf\.k=10 depth=50: fusion\.rrf\.depth: 100 is not allowed: at most",
    ):
        check_sweep([*shared, "fusion.rrf.k=10,60", "depth=100,50", "fusion.rrf.depth=100"])
    assert sweep_jobs(["hparams_search=rrf_optuna"]) is None  # Optuna draws its jobs as it goes
