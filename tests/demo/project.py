"""The made-up project the demo agent works on: ``ledgerly``, a small CLI that
imports bank statement exports (CSV), categorizes transactions and prints
monthly reports.

`initial_files` returns the repository as it is when the session starts:
hand-written modules and tests, plus three large generated files (a fixture
statement, a merchant table and a lock file) that are big enough to be stored
as blobs when the agent reads them. Everything is a pure function of a seed.
"""

from __future__ import annotations

import random

__all__ = ["ROOT", "initial_files"]

#: The project's directory in the demo session's environment.
ROOT = "/home/dev/ledgerly"

_PYPROJECT = """\
[build-system]
requires = ["hatchling>=1.21"]
build-backend = "hatchling.build"

[project]
name = "ledgerly"
version = "0.4.1"
description = "Import bank statement exports, categorize transactions, print monthly reports."
readme = "README.md"
requires-python = ">=3.11"
dependencies = [
    "python-dateutil>=2.9",
]

[project.optional-dependencies]
dev = ["pytest>=8.0", "pytest-cov>=5.0", "ruff>=0.4"]

[project.scripts]
ledgerly = "ledgerly.cli:main"

[tool.ruff]
line-length = 99
target-version = "py311"

[tool.ruff.lint]
select = ["E", "F", "I", "B", "UP"]

[tool.pytest.ini_options]
testpaths = ["tests"]
addopts = "-ra"
"""

_README = """\
# ledgerly

Import the CSV exports of your bank, sort every transaction into a category and
print a monthly report.

```console
$ ledgerly import statements/2023.csv --db ledger.sqlite
imported 2912 transactions (14 duplicates skipped)
$ ledgerly report --month 2023-11
Groceries        -612.40
Transport        -143.90
Eating out       -221.75
Income          4,180.00
```

## Supported exports

| bank              | columns                                    | notes                    |
|-------------------|--------------------------------------------|--------------------------|
| Northwind Savings | Date, Description, Amount, Balance         | amounts with sign        |
| Harbor Credit     | Posted, Payee, Debit, Credit               | two amount columns       |

## Categories

Categories come from `src/ledgerly/_merchants.py` (generated from
`data/merchants.tsv`) and from the rules in `~/.config/ledgerly/rules.toml`.

## Development

```console
$ python -m venv .venv && . .venv/bin/activate
$ pip install -e '.[dev]'
$ pytest
```
"""

_CHANGELOG = """\
# Changelog

## 0.4.1 - 2024-02-20
- Fix: skip the summary rows Harbor Credit appends to its exports.

## 0.4.0 - 2024-01-28
- `ledgerly report --month` prints one month.
- Merchant table regenerated (2,400 merchants).

## 0.3.0 - 2023-12-10
- Harbor Credit exports (separate debit and credit columns).
"""

_INIT = '''\
"""ledgerly: bank statement import, categorization and reports."""

__version__ = "0.4.1"
'''

_MONEY = '''\
"""Money amounts: parsed from statement text into Decimal, never float."""

from __future__ import annotations

from decimal import ROUND_HALF_EVEN, Decimal

__all__ = ["CENT", "format_amount", "parse_amount", "quantize"]

CENT = Decimal("0.01")


def parse_amount(text: str) -> Decimal:
    """Parse an amount as the bank wrote it, e.g. ``-12.50`` or ``$7.00``."""
    text = text.strip().replace("$", "")
    return Decimal(text)


def quantize(amount: Decimal) -> Decimal:
    """Round to whole cents."""
    return amount.quantize(CENT, rounding=ROUND_HALF_EVEN)


def format_amount(amount: Decimal, *, width: int = 10) -> str:
    """Right-aligned amount with a thousands separator."""
    return f"{quantize(amount):>{width},.2f}"
'''

_PARSER = '''\
"""Statement parsers: one function per bank export format."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path

from .money import parse_amount

__all__ = ["Transaction", "detect_format", "parse_date", "read_statement"]


@dataclass(frozen=True, slots=True)
class Transaction:
    """One line of a statement."""

    day: date
    description: str
    amount: Decimal
    account: str = ""


def parse_date(text: str) -> date:
    """Parse a statement date (ISO format: 2023-11-04)."""
    return datetime.strptime(text.strip(), "%Y-%m-%d").date()


def detect_format(header: list[str]) -> str:
    """Name the export format from its header row."""
    columns = [c.strip().lower() for c in header]
    if columns[:3] == ["date", "description", "amount"]:
        return "northwind"
    if columns[:2] == ["posted", "payee"]:
        return "harbor"
    raise ValueError(f"unknown statement format with columns {header!r}")


def _northwind(rows: Iterator[list[str]], account: str) -> Iterator[Transaction]:
    for row in rows:
        if not row or not row[0].strip():
            continue
        yield Transaction(parse_date(row[0]), row[1].strip(), parse_amount(row[2]), account)


def _harbor(rows: Iterator[list[str]], account: str) -> Iterator[Transaction]:
    for row in rows:
        if not row or row[0].startswith("Total"):
            continue
        debit = parse_amount(row[2]) if row[2].strip() else Decimal(0)
        credit = parse_amount(row[3]) if row[3].strip() else Decimal(0)
        yield Transaction(parse_date(row[0]), row[1].strip(), credit - debit, account)


def read_statement(path: Path, *, account: str = "") -> list[Transaction]:
    """Read every transaction of an export file."""
    with path.open(newline="", encoding="utf-8-sig") as handle:
        rows = csv.reader(handle)
        header = next(rows)
        kind = detect_format(header)
        parse = _northwind if kind == "northwind" else _harbor
        return list(parse(rows, account or path.stem))
'''

_CATEGORIZE = '''\
"""Sort transactions into categories by merchant name and user rules."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from ._merchants import MERCHANTS
from .parser import Transaction

__all__ = ["Rule", "categorize", "load_rules", "merchant_of"]

_NOISE = re.compile(r"\\b(POS|CARD \\d{4}|REF \\w+)\\b")


@dataclass(frozen=True, slots=True)
class Rule:
    """A user rule: descriptions matching ``pattern`` go to ``category``."""

    pattern: re.Pattern[str]
    category: str


def load_rules(path: Path) -> list[Rule]:
    """Load ``[[rule]]`` tables from a TOML file."""
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    return [Rule(re.compile(r["match"]), r["category"]) for r in data.get("rule", [])]


def merchant_of(description: str) -> str:
    """The merchant part of a description, without card and reference noise."""
    name = description.split("  ")[0]
    return _NOISE.sub("", name).strip()


def categorize(tx: Transaction, rules: list[Rule]) -> str:
    """The category of one transaction: user rules first, then the merchant table."""
    for rule in rules:
        if rule.pattern.search(tx.description):
            return rule.category
    merchant = merchant_of(tx.description)
    for name, category in MERCHANTS:
        if name == merchant:
            return category
    return "Uncategorized"
'''

_REPORT = '''\
"""Monthly reports."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from decimal import Decimal

from .categorize import Rule, categorize
from .money import format_amount
from .parser import Transaction

__all__ = ["month_totals", "render"]


def month_totals(txs: Iterable[Transaction], rules: list[Rule], month: str
                 ) -> dict[str, Decimal]:
    """Total per category for one month (``YYYY-MM``)."""
    totals: dict[str, Decimal] = defaultdict(Decimal)
    for tx in txs:
        if tx.day.strftime("%Y-%m") != month:
            continue
        totals[categorize(tx, rules)] += tx.amount
    return dict(sorted(totals.items()))


def render(totals: dict[str, Decimal]) -> str:
    """The report as aligned text, one category a line."""
    width = max((len(name) for name in totals), default=8)
    lines = [f"{name:<{width}}  {format_amount(amount)}" for name, amount in totals.items()]
    return "\\n".join(lines)
'''

_CLI = '''\
"""The ledgerly command."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .categorize import load_rules
from .parser import read_statement
from .report import month_totals, render

RULES = Path("~/.config/ledgerly/rules.toml").expanduser()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ledgerly")
    sub = parser.add_subparsers(dest="command", required=True)
    imp = sub.add_parser("import", help="import a statement export")
    imp.add_argument("file", type=Path)
    rep = sub.add_parser("report", help="print a monthly report")
    rep.add_argument("file", type=Path)
    rep.add_argument("--month", required=True, help="YYYY-MM")
    args = parser.parse_args(argv)

    txs = read_statement(args.file)
    if args.command == "import":
        print(f"imported {len(txs)} transactions")
        return 0
    rules = load_rules(RULES) if RULES.exists() else []
    print(render(month_totals(txs, rules, args.month)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''

_TEST_MONEY = """\
from decimal import Decimal

import pytest

from ledgerly.money import format_amount, parse_amount, quantize


def test_parse_amount_plain():
    assert parse_amount("12.50") == Decimal("12.50")


def test_parse_amount_negative():
    assert parse_amount("-7.01") == Decimal("-7.01")


def test_parse_amount_dollar_sign():
    assert parse_amount(" $7.00 ") == Decimal("7.00")


@pytest.mark.parametrize("raw, expected", [("0.005", "0.00"), ("0.015", "0.02"), ("2.68", "2.68")])
def test_quantize_rounds_half_even(raw, expected):
    assert quantize(Decimal(raw)) == Decimal(expected)


def test_format_amount_uses_thousands_separator():
    assert format_amount(Decimal("4180")) == "  4,180.00"
"""

_TEST_PARSER = """\
from datetime import date
from decimal import Decimal
from pathlib import Path

import pytest

from ledgerly.parser import detect_format, parse_date, read_statement

FIXTURES = Path(__file__).parent / "fixtures"


def test_parse_date_iso():
    assert parse_date("2023-11-04") == date(2023, 11, 4)


def test_detect_format_northwind():
    assert detect_format(["Date", "Description", "Amount", "Balance"]) == "northwind"


def test_detect_format_harbor():
    assert detect_format(["Posted", "Payee", "Debit", "Credit"]) == "harbor"


def test_detect_format_unknown():
    with pytest.raises(ValueError, match="unknown statement format"):
        detect_format(["When", "What"])


def test_read_small_statement():
    txs = read_statement(FIXTURES / "small.csv")
    assert len(txs) == 9
    assert txs[0].amount == Decimal("-4.75")
    assert txs[-1].description == "PAYROLL NORTHWIND LOGISTICS"


def test_read_big_statement_counts():
    txs = read_statement(FIXTURES / "statement_2023.csv")
    assert len(txs) > 2500
"""

_TEST_CATEGORIZE = """\
import re
from datetime import date
from decimal import Decimal

from ledgerly.categorize import Rule, categorize, merchant_of
from ledgerly.parser import Transaction


def tx(description: str) -> Transaction:
    return Transaction(date(2023, 11, 4), description, Decimal("-1.00"))


def test_merchant_of_strips_card_noise():
    assert merchant_of("GREENLEAF MARKET POS CARD 4412  PORTLAND") == "GREENLEAF MARKET"


def test_rules_win_over_merchant_table():
    rules = [Rule(re.compile("GREENLEAF"), "Treats")]
    assert categorize(tx("GREENLEAF MARKET  PORTLAND"), rules) == "Treats"


def test_merchant_table():
    assert categorize(tx("GREENLEAF MARKET  PORTLAND"), []) == "Groceries"


def test_unknown_merchant():
    assert categorize(tx("SOMEWHERE NEW  TOWN"), []) == "Uncategorized"
"""

_TEST_REPORT = """\
from datetime import date
from decimal import Decimal

from ledgerly.parser import Transaction
from ledgerly.report import month_totals, render


def test_month_totals_filters_month():
    txs = [
        Transaction(date(2023, 11, 4), "GREENLEAF MARKET", Decimal("-10.00")),
        Transaction(date(2023, 12, 1), "GREENLEAF MARKET", Decimal("-99.00")),
    ]
    assert month_totals(txs, [], "2023-11") == {"Groceries": Decimal("-10.00")}


def test_render_aligns_columns():
    text = render({"Groceries": Decimal("-612.4"), "Income": Decimal("4180")})
    assert text.splitlines() == ["Groceries     -612.40", "Income      4,180.00"]
"""

_SMALL_CSV = """\
Date,Description,Amount,Balance
2023-11-01,BLUE DOOR COFFEE POS CARD 4412  PORTLAND,-4.75,1203.11
2023-11-01,GREENLEAF MARKET POS CARD 4412  PORTLAND,-38.20,1164.91
2023-11-02,TRIMET TICKETS  PORTLAND,-2.80,1162.11
2023-11-03,"RIVERSIDE HARDWARE  PORTLAND","-1,024.00",138.11
2023-11-03,REFUND RIVERSIDE HARDWARE,(24.00),162.11
2023-11-04,GREENLEAF MARKET POS CARD 4412  PORTLAND,-61.05,101.06
2023-11-06,CITY WATER BUREAU REF 88213,-47.10,53.96
2023-11-07,BLUE DOOR COFFEE POS CARD 4412  PORTLAND,-5.25,48.71
2023-11-15,PAYROLL NORTHWIND LOGISTICS,"2,090.00","2,138.71"
"""

_CATEGORIES = [
    ("Groceries", ["MARKET", "GROCER", "FOODS", "PANTRY", "FARM STAND"]),
    ("Eating out", ["COFFEE", "CAFE", "DINER", "PIZZA", "TAQUERIA", "NOODLE BAR", "BAKERY"]),
    ("Transport", ["TICKETS", "FUEL", "PARKING", "BIKE SHARE", "AUTO REPAIR"]),
    ("Home", ["HARDWARE", "FURNITURE", "GARDEN CENTER", "LIGHTING"]),
    ("Utilities", ["WATER BUREAU", "ELECTRIC", "GAS CO", "INTERNET", "MOBILE"]),
    ("Health", ["PHARMACY", "DENTAL", "CLINIC", "OPTICAL"]),
    ("Leisure", ["CINEMA", "BOOKS", "RECORDS", "CLIMBING GYM", "MUSEUM"]),
]
_WORDS = [
    "BLUE",
    "DOOR",
    "GREEN",
    "LEAF",
    "RIVER",
    "SIDE",
    "NORTH",
    "STAR",
    "OAK",
    "PINE",
    "CEDAR",
    "HARBOR",
    "LANTERN",
    "COPPER",
    "MAPLE",
    "FOX",
    "WILLOW",
    "STONE",
    "BRIGHT",
    "SUMMIT",
    "ORCHARD",
    "BRIDGE",
    "FERN",
    "ROSE",
    "HILL",
    "LAKE",
    "RAVEN",
    "SILVER",
]
_TOWNS = ["PORTLAND", "SALEM", "EUGENE", "BEND", "ASTORIA", "HOOD RIVER", "CORVALLIS"]


def _merchants(rng: random.Random, count: int) -> list[tuple[str, str]]:
    seen: set[str] = set()
    out: list[tuple[str, str]] = []
    while len(out) < count:
        category, kinds = rng.choice(_CATEGORIES)
        name = f"{rng.choice(_WORDS)}{rng.choice(_WORDS)} {rng.choice(kinds)}"
        if name in seen:
            continue
        seen.add(name)
        out.append((name, category))
    out.sort()
    return out


def _merchant_module(merchants: list[tuple[str, str]]) -> str:
    lines = [
        '"""Merchant name -> category. Generated by scripts/gen_merchants.py from',
        'data/merchants.tsv; do not edit by hand."""',
        "",
        "MERCHANTS: list[tuple[str, str]] = [",
    ]
    lines += [f"    ({name!r}, {category!r})," for name, category in merchants]
    lines += ["]", ""]
    return "\n".join(lines)


def _statement(rng: random.Random, merchants: list[tuple[str, str]], rows: int) -> str:
    lines = ["Date,Description,Amount,Balance"]
    balance = 2400.00
    for i in range(rows):
        month = 1 + i * 12 // rows
        day = f"2023-{month:02d}-{1 + rng.randrange(28):02d}"
        if month != 1 + (i - 1) * 12 // rows:
            day, desc, amount = f"2023-{month:02d}-15", "PAYROLL NORTHWIND LOGISTICS", 2090.00
        else:
            name, _ = rng.choice(merchants)
            card = f" POS CARD {rng.choice(['4412', '0097'])}" if rng.random() < 0.6 else ""
            ref = f" REF {rng.randrange(10**5, 10**6)}" if rng.random() < 0.15 else ""
            desc = f"{name}{card}{ref}  {rng.choice(_TOWNS)}"
            amount = -round(rng.lognormvariate(3.0, 1.0), 2)
            if rng.random() < 0.02:
                amount = -amount  # a refund
        balance += amount
        shown = f"{amount:,.2f}"
        if rng.random() < 0.05 and amount < 0:
            shown = f"({-amount:,.2f})"  # some exports write debits in parentheses
        cell = f'"{shown}"' if "," in shown else shown
        bal = f"{balance:,.2f}"
        lines.append(f"{day},{desc},{cell},{f'{chr(34)}{bal}{chr(34)}' if ',' in bal else bal}")
    return "\n".join(lines) + "\n"


_PACKAGES = [
    "anyio",
    "attrs",
    "certifi",
    "charset-normalizer",
    "click",
    "colorama",
    "coverage",
    "distlib",
    "filelock",
    "idna",
    "iniconfig",
    "markdown-it-py",
    "mdurl",
    "packaging",
    "platformdirs",
    "pluggy",
    "pygments",
    "pytest",
    "pytest-cov",
    "python-dateutil",
    "pyyaml",
    "requests",
    "rich",
    "ruff",
    "six",
    "sniffio",
    "tomli",
    "typing-extensions",
    "urllib3",
    "virtualenv",
    "wheel",
    "zipp",
]


_PINNED = {
    "pytest": "8.0.2",
    "pytest-cov": "5.0.0",
    "ruff": "0.4.1",
    "coverage": "7.4.3",
    "pluggy": "1.4.0",
    "python-dateutil": "2.9.0",
}


def _lockfile(rng: random.Random) -> str:
    out = ["version = 1", 'requires-python = ">=3.11"', ""]
    for name in _PACKAGES:
        version = f"{rng.randrange(0, 9)}.{rng.randrange(0, 20)}.{rng.randrange(0, 12)}"
        version = _PINNED.get(name, version)
        out += [
            "[[package]]",
            f'name = "{name}"',
            f'version = "{version}"',
            'source = { registry = "https://pypi.org/simple" }',
        ]
        sdist = f"{rng.getrandbits(256):064x}"
        out.append(
            f'sdist = {{ url = "https://files.pythonhosted.org/packages/{sdist[:2]}/'
            f'{sdist[2:4]}/{sdist[4:]}/{name}-{version}.tar.gz", hash = "sha256:{sdist}", '
            f"size = {rng.randrange(20_000, 900_000)} }}"
        )
        out.append("wheels = [")
        for tag in (
            "cp311-cp311-manylinux_2_17_x86_64",
            "cp311-cp311-macosx_11_0_arm64",
            "cp312-cp312-manylinux_2_17_x86_64",
            "cp312-cp312-macosx_11_0_arm64",
            "cp312-cp312-win_amd64",
            "cp313-cp313-manylinux_2_17_x86_64",
            "cp313-cp313-musllinux_1_2_x86_64",
            "py3-none-any",
        ):
            digest = f"{rng.getrandbits(256):064x}"
            out.append(
                f'    {{ url = "https://files.pythonhosted.org/packages/{digest[:2]}/'
                f'{digest[2:4]}/{digest[4:]}/{name.replace("-", "_")}-{version}-{tag}.whl",'
                f' hash = "sha256:{digest}", size = {rng.randrange(10_000, 2_000_000)} }},'
            )
        out += ["]", ""]
    return "\n".join(out)


def initial_files(seed: int) -> dict[str, str]:
    """The repository at the start of the demo session: relative path -> text."""
    rng = random.Random(f"ledgerly-{seed}")
    merchants = _merchants(rng, 2400)
    # The tests expect these merchants in the table.
    merchants = sorted(
        {*merchants, ("GREENLEAF MARKET", "Groceries"), ("BLUE DOOR COFFEE", "Eating out")}
    )
    return {
        "pyproject.toml": _PYPROJECT,
        "README.md": _README,
        "CHANGELOG.md": _CHANGELOG,
        "uv.lock": _lockfile(rng),
        "src/ledgerly/__init__.py": _INIT,
        "src/ledgerly/money.py": _MONEY,
        "src/ledgerly/parser.py": _PARSER,
        "src/ledgerly/categorize.py": _CATEGORIZE,
        "src/ledgerly/report.py": _REPORT,
        "src/ledgerly/cli.py": _CLI,
        "src/ledgerly/_merchants.py": _merchant_module(merchants),
        "tests/test_money.py": _TEST_MONEY,
        "tests/test_parser.py": _TEST_PARSER,
        "tests/test_categorize.py": _TEST_CATEGORIZE,
        "tests/test_report.py": _TEST_REPORT,
        "tests/fixtures/small.csv": _SMALL_CSV,
        "tests/fixtures/statement_2023.csv": _statement(rng, merchants, 2900),
    }
