"""Bring your own model: MPS and LP files as [`ILP`][combolayer.ILP] specs.

HiGHS reads the file (``Highs.readModel``), so every MPS/LP dialect HiGHS
accepts works here; the model is then read back column-wise with
``Highs.getLp()`` and turned into an ILP:

- every column is an output variable (``shape = [num_vars]``), with its
  bounds and integrality (integer columns bounded by [0, 1] become
  ``"binary"``);
- rows with ``lower == upper`` become ``==``, one-sided rows ``<=`` or
  ``>=``, ranged rows two constraints; HiGHS's row names become the
  constraints' ``name`` (``name`` and ``name:lower``/``name:upper`` for
  ranged rows);
- the objective sense is kept, and the objective's coefficients become the
  spec's default cost (``spec.default_cost``, also
  `FileModel.cost`), which ``combolayer solve`` uses without
  ``--costs``. A constant objective offset does not change the argmin: it is
  kept as ``spec.default_offset``, and ``combolayer solve`` adds it to the
  objective it prints with the file's own costs. Both are fields of the spec:
  saved to JSON and read back with it.

Nothing in a file is dropped silently: a model that an ILP layer cannot
represent (a quadratic objective, quadratic constraints, SOS, indicator, cone
or general constraints, semi-continuous or semi-integer variables, lazy
constraints or user cuts) raises `SpecError` naming what it has. HiGHS reads
a quadratic objective without complaint (its Hessian), so that is checked on
the model read; HiGHS refuses the other sections, and the file's text is then
scanned to name the one it holds. A read that HiGHS finishes with a warning in its
log (an entry for an undeclared row, a duplicate entry: skipped) is refused, and so
is an MPS file that names a column outside COLUMNS (HiGHS adds a variable) or holds
a value that is not a number (HiGHS reads ``1.0x`` as 1.0), which it takes silently;
so are files HiGHS reads otherwise than other readers: an LP ``Binary`` column bounded
beyond [0, 1], an MPS RHS on a free row other than the first, names with spaces
(HiGHS's fixed-format reader misreads BV and UI bounds).

Example:
    >>> spec = cl.ILP.from_file("model.mps")            # doctest: +SKIP
    >>> layer = cl.ComboLayer(spec, method="identity")  # doctest: +SKIP
"""

from __future__ import annotations

import io
import math
import os
import re
import zlib
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ..backends.highs_runtime import new_highs
from ..errors import SpecError

#: Suffixes HiGHS's reader accepts (also gzipped: ``model.mps.gz``).
SUFFIXES = (".mps", ".lp", ".mps.gz", ".lp.gz")


class FileModel(NamedTuple):
    """What `read_model` found in a file.

    Attributes:
        arguments: the keyword arguments of the equivalent
            [`ILP`][combolayer.ILP] (``shape = [num_vars]``); ``ILP.from_file``
            builds it (this module never imports the specs).
        cost: the file's objective coefficients, shape ``(num_vars,)``.
        offset: the objective's constant term (not part of the spec).
        names: the column names, in variable order (empty strings when the
            file has none).
    """

    arguments: dict
    cost: np.ndarray
    offset: float
    names: list[str]


def is_model_file(path: str | os.PathLike) -> bool:
    """True when ``path`` names an MPS or LP file by its suffix (case-insensitive)."""
    return str(path).lower().endswith(SUFFIXES)


def read_model(path: str | os.PathLike) -> FileModel:
    """Read an MPS or LP file with HiGHS's reader.

    Args:
        path: a ``.mps`` or ``.lp`` file (optionally ``.gz``).

    Returns:
        A `FileModel` with the spec, the objective as a default cost,
        the objective offset and the column names.

    Raises:
        SpecError: the file is missing, HiGHS cannot read it or reads it with a
            warning (an entry it skipped or changed), an MPS file names a column
            outside its COLUMNS section or holds a value that is not a number, it
            has no variables, or it holds something an ILP cannot represent (a
            quadratic objective or constraint, SOS, indicator, cone or general
            constraints, semi-continuous or semi-integer variables).
    """
    import highspy

    path = Path(path)
    if not path.is_file():
        raise SpecError(f"no model file named {str(path)!r}")
    h = new_highs(threads=1)
    log = _HighsLog(h)
    try:
        status = h.readModel(str(path))
        names = [str(name) for name in h.getLp().col_names_]
    except UnicodeDecodeError as error:  # a name in the file, or HiGHS's words on it
        raise SpecError(f"{str(path)!r} is not UTF-8 text ({error}): expected an MPS or LP "
                        "file whose names are ASCII or UTF-8") from None
    if status not in (highspy.HighsStatus.kOk, highspy.HighsStatus.kWarning):
        feature = unsupported_feature(path)
        if feature is not None:
            raise SpecError(_unsupported(path, feature))
        said = f": {'; '.join(log.errors)}" if log.errors else ""
        raise SpecError(
            f"HiGHS could not read {str(path)!r} ({status.name}{said}): expected an MPS or LP "
            "file that HiGHS can parse"
        )
    if log.fixed_format:
        raise SpecError(f"{str(path)!r} has names with spaces, which HiGHS reads with its "
                        "fixed-format MPS reader; that reader misreads some bounds without a "
                        "word (BV as continuous, an unknown bound type as FX): expected names "
                        "without spaces (free MPS)")
    warned = log.warnings
    if warned or (status != highspy.HighsStatus.kOk and not log.meant):
        said = "; ".join(warned) or f"readModel returned {status.name}"
        raise SpecError(f"HiGHS read {str(path)!r} with a warning ({said}): its reader skips "
                        "or changes an entry it cannot place, so the model would not be the "
                        "file's; fix the file")
    hessian = h.getModel().hessian_
    if hessian.dim_ > 0 and np.any(np.asarray(hessian.value_, dtype=float) != 0.0):
        raise SpecError(_unsupported(path, "a quadratic objective (QUADOBJ, QMATRIX or "
                                           "QSECTION; [ ... ] in an LP objective)"))
    lp = h.getLp()
    n = int(lp.num_col_)
    if n == 0:
        raise SpecError(f"{str(path)!r} has no variables")
    cost = np.asarray(lp.col_cost_, dtype=float)
    lower = np.asarray(lp.col_lower_, dtype=float)
    upper = np.asarray(lp.col_upper_, dtype=float)
    integrality = _integrality(lp, lower, upper, path)
    sense = "max" if lp.sense_ == highspy.ObjSense.kMaximize else "min"
    names = names or [""] * n
    if path.name.lower().removesuffix(".gz").endswith(".lp"):
        _check_lp_binaries(path, names, integrality, lower, upper)
    else:
        _check_mps_text(path, names, sense)
    _check_cost(cost, names, path)
    arguments = dict(shape=[n], sense=sense, integrality=integrality, lower=lower.tolist(),
                     upper=upper.tolist(), constraints=_constraints(lp))
    return FileModel(arguments, cost, float(lp.offset_), names)


#: `combolayer.backends.solver.MAX_COST`, the bound on a layer's costs (the solver
#: imports the specs, so the number is repeated here; a test keeps the two equal).
MAX_COST = 1e15


def _check_cost(cost: np.ndarray, names: list[str], path: Path) -> None:
    """The objective as a default cost is held to the rule of costs given to a layer:
    HiGHS reads a coefficient from 1e20 on as infinite (``1e300 y`` became ``inf``)."""
    bad = np.flatnonzero(~(np.abs(cost) < MAX_COST))
    if bad.size:
        j = int(bad[0])
        name = f" ({names[j]})" if names[j] else ""
        raise SpecError(f"{str(path)!r}: the objective coefficient of column {j}{name} is "
                        f"{cost[j]:g}: expected a magnitude below {MAX_COST:g}, as for costs "
                        "given to a layer (HiGHS reads one from 1e20 on as infinite)")


def _integrality(lp, lower: np.ndarray, upper: np.ndarray, path: Path) -> list[str]:
    import highspy

    n = len(lower)
    kinds = list(lp.integrality_) or [highspy.HighsVarType.kContinuous] * n
    out = []
    for j, kind in enumerate(kinds):
        if kind == highspy.HighsVarType.kContinuous:
            out.append("continuous")
        elif kind in (highspy.HighsVarType.kInteger, highspy.HighsVarType.kImplicitInteger):
            out.append("binary" if lower[j] >= 0.0 and upper[j] <= 1.0 else "integer")
        else:
            name = "semi-continuous" if "Continuous" in kind.name else "semi-integer"
            raise SpecError(_unsupported(path, f"{name} variables (column {j})"))
    return out


def _constraints(lp) -> list[dict]:
    """Rows from HiGHS's matrix (column-wise as read, row-wise handled too), in the
    file's order."""
    import highspy

    m = int(lp.num_row_)
    matrix = lp.a_matrix_
    start = np.asarray(matrix.start_, dtype=np.int64)
    index = np.asarray(matrix.index_, dtype=np.int64)
    value = np.asarray(matrix.value_, dtype=float)
    rows: list[dict[int, float]] = [{} for _ in range(m)]
    if matrix.format_ == highspy.MatrixFormat.kRowwise:
        for i in range(m):
            for k in range(start[i], start[i + 1]):
                rows[i][int(index[k])] = float(value[k])
    else:
        for j in range(int(lp.num_col_)):
            for k in range(start[j], start[j + 1]):
                rows[int(index[k])][j] = float(value[k])
    names = list(lp.row_names_) or [None] * m
    constraints = []
    for i in range(m):
        lo, up, coefs = float(lp.row_lower_[i]), float(lp.row_upper_[i]), rows[i]
        name = str(names[i]) if names[i] else None
        if lo == up:
            constraints.append(dict(coefs=coefs, sense="==", rhs=lo, name=name))
            continue
        ranged = not math.isinf(lo) and not math.isinf(up)
        if not math.isinf(up):
            row_name = f"{name}:upper" if ranged and name else name
            constraints.append(dict(coefs=coefs, sense="<=", rhs=up, name=row_name))
        if not math.isinf(lo):
            row_name = f"{name}:lower" if ranged and name else name
            constraints.append(dict(coefs=coefs, sense=">=", rhs=lo, name=row_name))
    return constraints


def _unsupported(path: Path, feature: str) -> str:
    return (f"{str(path)!r} has {feature}, which an ILP layer cannot represent: expected a "
            "linear objective, linear constraints and continuous, integer or binary variables")


#: MPS section headers (first word of an unindented line) an ILP cannot hold.
_MPS_SECTIONS = {
    "QUADOBJ": "a quadratic objective (QUADOBJ section)",
    "QMATRIX": "a quadratic objective (QMATRIX section)",
    "QSECTION": "a quadratic objective (QSECTION section)",
    "QCMATRIX": "quadratic constraints (QCMATRIX section)",
    "SOS": "SOS constraints (SOS section)",
    "SETS": "SOS constraints (SETS section)",
    "INDICATORS": "indicator constraints (INDICATORS section)",
    "CSECTION": "cone constraints (CSECTION section)",
    "GENCONS": "general constraints (GENCONS section)",
    "PWLOBJ": "a piecewise-linear objective (PWLOBJ section)",
}
#: LP section keywords (a whole line, case-insensitive) an ILP cannot hold.
_LP_SECTIONS = [
    (re.compile(r"sos[12]?"), "SOS constraints (SOS section)"),
    (re.compile(r"semi-continuous|semis?"), "semi-continuous variables (Semi-continuous section)"),
    (re.compile(r"semi-integers?|semi-int"), "semi-integer variables (Semi-integer section)"),
    (re.compile(r"lazy\s+constraints?"), "lazy constraints (Lazy Constraints section)"),
    (re.compile(r"user\s+cuts?"), "user cuts (User Cuts section)"),
    (re.compile(r"general\s+constraints?|genconstrs?|gencons"),
     "general constraints (General Constraints section)"),
    (re.compile(r"pwlobj"), "a piecewise-linear objective (PWLObj section)"),
]
_LP_OBJECTIVE = re.compile(r"(minimi[sz]e|maximi[sz]e|minimum|maximum|min|max)\b")
_LP_CONSTRAINTS = re.compile(r"(subject\s+to|such\s+that|st|s\.t\.)\b")
_LP_OTHER = re.compile(r"(bounds?|generals?|gen|binary|binaries|bin|end)\s*$")


class _HighsLog:
    """What HiGHS logs on ``h`` from now on (its log goes here, not to the console):
    ``warnings`` (HiGHS's MPS reader returns kOk when it skips an entry for an undeclared
    row, a duplicate entry or an RHS of an undeclared row, and says so only in its
    log), ``errors`` (where its parser stopped), the warnings of a file read as it
    means (``meant``) and whether it read an MPS file in fixed format."""

    #: HiGHS's warning that its free-format MPS reader found names with spaces.
    FIXED_FORMAT = "switching to fixed format parser"
    #: HiGHS's warnings of a file read as it means: a variable twice in one LP row
    #: (summed, as every LP reader does); fixed format is refused on its own.
    MEANT = (FIXED_FORMAT, "the coefficients are summed")

    def __init__(self, h) -> None:
        self.warnings: list[str] = []
        self.meant: list[str] = []  # the MEANT ones
        self.errors: list[str] = []
        self.fixed_format = False
        h.setOptionValue("log_to_console", False)
        h.setOptionValue("output_flag", True)
        h.cbLogging.subscribe(self._collect)

    def _collect(self, event) -> None:
        import highspy

        kind, message = event.data_out.log_type, event.message.strip()
        if kind == highspy.HighsLogType.kWarning:
            self.fixed_format |= self.FIXED_FORMAT in message
            meant = any(words in message for words in self.MEANT)
            (self.meant if meant else self.warnings).append(message)
        elif kind == highspy.HighsLogType.kError:
            self.errors.append(message)


#: A number as HiGHS reads it whole (Python's float() also takes 1_000 and nan).
_NUMBER = re.compile(r"[+-]?((\d+\.?\d*|\.\d+)([eEdD][+-]?\d+)?|inf(inity)?)", re.IGNORECASE)
#: A field that starts as a number: HiGHS reads its leading number and drops the rest
#: (any other word it reads as 0).
_NUMBER_START = re.compile(r"[+-]?(\d|\.\d)")

#: MPS section names (those an ILP can hold, then the others), and those whose header
#: line may carry a value of its own.
_MPS_HEADERS = {"NAME", "ROWS", "COLUMNS", "RHS", "RANGES", "BOUNDS", "ENDATA", "OBJSENSE",
                "OBJSENS", "OBJNAME", *_MPS_SECTIONS}
_MPS_NAMED_HEADERS = {"NAME", "OBJSENSE", "OBJSENS", "OBJNAME", "QCMATRIX", "CSECTION",
                      "QSECTION"}


def _mps_header(line: str, fields: list[str]) -> bool:
    """Whether an MPS line opens a section: it starts in column 1 with a section's name,
    alone or (for a few) with its value. Free-format data lines may start in column 1
    too, and one whose first field is a vector's name ("RHS c1 1.0") is no header."""
    if line[0] in " \t":
        return False
    word = fields[0].upper()
    return word in _MPS_HEADERS and (len(fields) == 1 or word in _MPS_NAMED_HEADERS)


def _check_mps_text(path: Path, names: list[str], sense: str) -> None:
    """Raise SpecError for what HiGHS's MPS reader takes without a word: a column named
    outside COLUMNS (a BOUNDS entry for an unknown column adds a variable), a value
    field that is not a number (``1.0x`` is read as 1.0, ``one`` as 0) or a field more
    or less than an entry holds (dropped), an RHS of a free row other than the
    objective (added to the objective's constant), an OBJNAME other than the first
    free row (HiGHS takes the first as the objective) and an OBJSENSE read as another
    sense than ``sense`` (``OBJSENSE MAXIMIZE`` on one line minimises). Names that
    hold spaces, which would shift the fields, never reach here: HiGHS reads them in
    fixed format, which `read_model` refuses."""
    section, declared, rows, free_rows, named, senses = "", set(), set(), [], [], []
    for number, line in enumerate(_text_lines(path), 1):
        if not line.strip() or line[0] == "*":
            continue
        fields = line.split()
        if _mps_header(line, fields):
            section = fields[0].upper()
            if len(fields) > 1 and section == "OBJNAME":
                named.append((number, fields[1]))
            if len(fields) > 1 and section in ("OBJSENSE", "OBJSENS"):
                senses.append((number, fields[1]))
            continue
        if section == "OBJNAME":
            named.append((number, fields[0]))
        if section in ("OBJSENSE", "OBJSENS"):
            senses.append((number, fields[0]))
        if section == "ROWS" and len(fields) > 1:
            rows.add(fields[1])
            if fields[0].upper() == "N":
                free_rows.append(fields[1])
        if section == "COLUMNS" and len(fields) > 1 and fields[1].strip("'\"").upper() == "MARKER":
            continue
        if section == "COLUMNS":
            declared.add(fields[0])
        positions = _value_positions(section, fields, rows, declared)
        if positions is None:
            raise SpecError(f"{str(path)!r} line {number}: {len(fields)} fields are no {section} "
                            "entry (a name without its value, or a field more: HiGHS would drop "
                            "one); fix the file")
        for k in positions:
            value = fields[k]
            if not _NUMBER.fullmatch(value):
                read = ("its leading digits and drop the rest" if _NUMBER_START.match(value)
                        else "it as 0")
                raise SpecError(f"{str(path)!r} line {number}: {value!r} in the {section} "
                                f"section is not a number (HiGHS would read {read}); fix the "
                                "file")
            row = fields[k - 1]
            if section == "RHS" and row in free_rows[1:]:
                raise SpecError(f"{str(path)!r} line {number}: an RHS for the free row {row!r}, "
                                f"which is not the objective ({free_rows[0]!r}, the first): "
                                "HiGHS would add it to the objective's constant; remove it")
    for number, name in named:
        if free_rows and name != free_rows[0]:
            raise SpecError(f"{str(path)!r} line {number}: OBJNAME names {name!r}, but HiGHS "
                            f"takes the first free row ({free_rows[0]!r}) as the objective; "
                            "put the objective's row first among the N rows")
    for number, word in senses:
        meant = _SENSES.get(word.upper())
        if meant != sense:
            said = (f"but HiGHS reads the file as {sense}imising" if meant else
                    "which is no objective sense")
            raise SpecError(f"{str(path)!r} line {number}: OBJSENSE {word!r}, {said}; write "
                            "OBJSENSE alone on its line and MAX or MIN on the next")
    for name in names:
        if name and name not in declared:
            raise SpecError(f"{str(path)!r} names the column {name!r} outside its COLUMNS "
                            "section (in BOUNDS, say): HiGHS adds it as a new variable, so "
                            "the model would not be the file's; declare it in COLUMNS or fix "
                            "the name")


#: OBJSENSE's words, by the sense they mean.
_SENSES = {"MAX": "max", "MAXIMIZE": "max", "MAXIMISE": "max", "MAXIMUM": "max",
           "MIN": "min", "MINIMIZE": "min", "MINIMISE": "min", "MINIMUM": "min"}


def _value_positions(section: str, fields: list[str], rows: set[str],
                     columns: set[str]) -> tuple[int, ...] | None:
    """Where a data line of ``section`` holds its values, or None for a line HiGHS reads
    by dropping a field. An RHS or RANGES line may leave out the set's name (its first
    field is then a row's), and so may a BOUNDS line (its second field is then a
    column's)."""
    count = len(fields)
    if section == "COLUMNS":
        return {3: (2,), 5: (2, 4)}.get(count)
    if section in ("RHS", "RANGES"):
        named = fields[0] not in rows
        return ({3: (2,), 5: (2, 4)} if named else {2: (1,), 4: (1, 3)}).get(count)
    if section == "BOUNDS":  # FR, MI, PL and BV take no value
        unnamed = count == 3 and fields[0].upper() in _VALUED_BOUNDS and fields[1] in columns
        return {2: (), 3: (2,) if unnamed else (), 4: (3,)}.get(count)
    return ()


#: The MPS bound types that take a value.
_VALUED_BOUNDS = {"UP", "LO", "FX", "LI", "UI", "SC"}


#: Words that open an LP section (the first word of its line).
_LP_KEYWORDS = {"minimize", "minimise", "maximize", "maximise", "minimum", "maximum", "min",
                "max", "subject", "such", "st", "s.t.", "bounds", "bound", "general",
                "generals", "gen", "binary", "binaries", "bin", "semi-continuous", "semis",
                "semi", "semi-integer", "semi-integers", "semi-int", "sos", "sos1", "sos2",
                "integer", "integers",
                "lazy", "user", "pwlobj", "genconstrs", "gencons", "end"}
_LP_BINARY = {"binary", "binaries", "bin"}


def _check_lp_binaries(path: Path, names: list[str], integrality: list[str],
                       lower: np.ndarray, upper: np.ndarray) -> None:
    """Raise SpecError for a column an LP file declares binary and bounds outside [0, 1]
    (``x free`` or ``x <= 5`` in Bounds): HiGHS keeps those bounds and reads a general
    integer, where Gurobi and SCIP read a 0/1 variable."""
    binaries, binary = set(), False
    for raw in _text_lines(path):
        words = raw.split("\\", 1)[0].split()  # a backslash starts a comment
        if not words:
            continue
        keyword = words[0].lower()  # "bin:" names a row
        if keyword in _LP_KEYWORDS:  # names may follow a section's word on its line
            binary, words = keyword in _LP_BINARY, words[1:]
        if binary:
            binaries.update(words)
    for j, name in enumerate(names):
        if name in binaries and integrality[j] == "integer":  # beyond [0, 1]: not "binary"
            raise SpecError(f"{str(path)!r} declares {name!r} binary but bounds it by "
                            f"[{lower[j]:g}, {upper[j]:g}] (HiGHS reads a general integer there, "
                            "other readers a 0/1 variable): bound it within [0, 1], or declare "
                            "it in General")


def _lines(path: Path) -> list[str] | None:
    """The text lines of a model file, as HiGHS reads it: a ``.gz`` file's gzip members
    up to any bytes after them, or plain text (a file named ``.gz`` that is not gzipped);
    None when it cannot be read (a gzip member cut short)."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if path.name.lower().endswith(".gz") and data[:2] == _GZIP_MAGIC:
        members = []
        while data[:2] == _GZIP_MAGIC:
            member = zlib.decompressobj(16 + zlib.MAX_WBITS)  # a gzip header and trailer
            try:
                members.append(member.decompress(data))
            except zlib.error:
                return None
            if not member.eof:
                return None
            data = member.unused_data
        data = b"".join(members)
    return list(io.StringIO(data.decode(errors="replace"), newline=None))


_GZIP_MAGIC = b"\x1f\x8b"


def _text_lines(path: Path) -> list[str]:
    """`_lines`, or SpecError where Python cannot read the text HiGHS read (a gzip
    file without its trailer), which the checks need."""
    lines = _lines(path)
    if lines is None:
        raise SpecError(f"{str(path)!r} cannot be read as text here (a damaged gzip file?), so "
                        "what HiGHS read from it cannot be checked; expected an MPS or LP file, "
                        "plain or gzipped whole")
    return lines


def unsupported_feature(path: str | os.PathLike) -> str | None:
    """The first thing in an MPS or LP file that an ILP cannot represent, in words, or
    None: named from the file's text, for the sections HiGHS's reader refuses."""
    path = Path(path)
    is_lp = path.name.lower().removesuffix(".gz").endswith(".lp")
    lines = _lines(path)
    if lines is None:
        return None
    return _lp_feature(lines) if is_lp else _mps_feature(lines)


def _mps_feature(lines: list[str]) -> str | None:
    for line in lines:
        if not line.strip() or line[0] in " \t*":
            continue
        word = line.split()[0].upper()
        if word in _MPS_SECTIONS:
            return _MPS_SECTIONS[word]
    return None


#: A quadratic term in an LP file: ``[ x^2 + 2 x * y ]`` (brackets in a name are not).
_LP_QUADRATIC = re.compile(r"\[[^\]]*[\^*]")


def _lp_section(low: str) -> str | None:
    """The LP section a lower-cased line opens, or None."""
    if _LP_OBJECTIVE.fullmatch(low) or _LP_OBJECTIVE.match(low) and ":" in low:
        return "objective"
    if _LP_CONSTRAINTS.match(low):
        return "constraints"
    if _LP_OTHER.match(low):
        return "other"
    return None


def _lp_feature(lines: list[str]) -> str | None:
    section = ""
    for raw in lines:
        line = raw.split("\\", 1)[0].strip()  # a backslash starts a comment
        low = line.lower()
        if not low:
            continue
        for pattern, feature in _LP_SECTIONS:
            if pattern.fullmatch(low):
                return feature
        section = _lp_section(low) or section
        if section == "objective" and _LP_QUADRATIC.search(line):
            return "a quadratic objective ([ ... ] in the objective)"
        if section == "constraints" and _LP_QUADRATIC.search(line):
            return "quadratic constraints ([ ... ] in a constraint)"
        if section == "constraints" and ("->" in line or "<-" in line):
            return "indicator constraints (-> in a constraint)"
    return None
