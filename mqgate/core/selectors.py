"""
Message selectors (S2.8): the JMS SQL-92 conditional subset, compiled once to closures.

A consumer gives a selector when it attaches (STOMP C{selector} header, AMQP
C{apache.org:selector-filter:string} filter). L{compile_selector} parses it once into
nested closures; matching a message is then one call, with no parsing.

Types follow JMS 1.1 section 3.8.1.1, with one deliberate difference. Values are
numbers (C{int} exact, C{float} approximate), strings, booleans and NULL (C{None}); a
property of any other type (bytes, UUID, list, AMQP decimal) compares with nothing.
Only like types compare (strings and booleans only with C{=} and C{<>}); where JMS 1.1
calls a comparison of unlike types FALSE, here it is UNKNOWN like a comparison with
NULL, so C{NOT (a = 'x')} does not select a message whose C{a} is a number. Arithmetic
needs numbers, else (or on division by zero) it is UNKNOWN; exact / exact truncates
like Java. AND, OR and NOT are three-valued, and only TRUE selects.

Identifiers are case-sensitive, keywords are not. The names in L{HEADER_FIELDS} are
header fields, any other names an application property; both are read through a
C{lookup(name)} callable, so this module does not know how messages are stored.
L{message_field} is the one accessor the core uses for its L{BrokerMessage}.

A selector comes from the peer, so it is bounded (design rule 4): length and
nesting (the parser and evaluator never exhaust Python's stack), and LIKE never
backtracks (fixed-width segments between the C{%}, each matched leftmost).
"""

import collections
import functools
import operator
import re

from mqgate.core.errors import CoreError, ErrorKind
from mqgate.errors import MqgateError

__all__ = ["HEADER_FIELDS", "MAX_DEPTH", "MAX_SELECTOR_LENGTH", "Selector",
           "SelectorError", "SelectorTooDeep", "SelectorTooLong", "compile_selector",
           "message_field"]

#: The longest selector accepted, in characters.
MAX_SELECTOR_LENGTH = 4096

#: How deeply expressions may nest (parentheses, NOT, unary minus, operator chains).
#: Each level costs about twelve parser frames; 32 keeps well inside Python's stack.
MAX_DEPTH = 32

#: The header fields a selector may name (JMS 1.1 section 3.8.1.1, plus JMSExpiration).
HEADER_FIELDS = frozenset((
    "JMSMessageID", "JMSCorrelationID", "JMSPriority", "JMSDeliveryMode",
    "JMSTimestamp", "JMSType", "JMSExpiration"))

_KEYWORDS = frozenset(("AND", "OR", "NOT", "BETWEEN", "LIKE", "ESCAPE", "IN", "IS",
                       "NULL", "TRUE", "FALSE"))
_OPERATOR = re.compile(r"<>|<=|>=|[=<>+\-*/(),]")
_IDENTIFIER = re.compile(r"(?:[^\W\d]|\$)(?:\w|\$)*")   # Java: letters, digits, _ $
_WHITESPACE = " \t\r\n\f"
_NUMBER = re.compile(r"(?:[0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?")
_NUMBER_TAIL = re.compile(r"[\w$.]")    # glued to a number: "12e", "1.2.3", "5x"
_DIGITS = "0123456789"
_STRING = re.compile(r"'((?:[^']|'')*)'")


class SelectorError(CoreError):
    """A selector cannot be compiled (S2.8); the attach or SUBSCRIBE is refused.

    @ivar position: the offset in the selector text (from 0) where the problem is.
    @ivar problem: what is wrong there, e.g. C{"expected ')', found end of selector"}.
    """

    kind = ErrorKind.INVALID

    def __init__(self, position, problem):
        self.position = position
        self.problem = problem
        super().__init__(f"invalid selector at position {position}: {problem}")


class SelectorTooLong(SelectorError):
    """The selector is longer than L{MAX_SELECTOR_LENGTH} characters."""


class SelectorTooDeep(SelectorError):
    """The selector nests deeper than L{MAX_DEPTH} levels."""


# -- values ----------------------------------------------------------------------------

_NUM, _STR, _BOOL = "number", "string", "boolean"


def _kind(value):
    # bool before the isinstance tests: an int to Python, not a number to JMS.
    cls = type(value)
    if cls is str:
        return _STR
    if cls is int or cls is float:
        return _NUM
    if cls is bool:
        return _BOOL
    if isinstance(value, (int, float)):   # AMQP UInt, Long, Float32 ...
        return _NUM
    if isinstance(value, str):            # AMQP Symbol, Char
        return _STR
    return None


def _equal(a, b):
    if a is None or b is None:
        return None
    kind = _kind(a)
    if kind is None or kind != _kind(b):
        return None
    return a == b


def _numeric(compute):
    # Ordering and arithmetic take numbers only; anything else is UNKNOWN.
    def numeric(a, b):
        if _kind(a) is _NUM and _kind(b) is _NUM:
            return compute(a, b)
        return None
    return numeric


def _divide(a, b):
    if b == 0:
        return None
    if isinstance(a, int) and isinstance(b, int):
        # Java exact division truncates toward zero; Python's // floors.
        quotient = abs(a) // abs(b)
        return quotient if (a < 0) == (b < 0) else -quotient
    return a / b


_COMPARISONS = {
    "=": _equal, "<>": lambda a, b: _not3(_equal(a, b)),
    "<": _numeric(operator.lt), "<=": _numeric(operator.le),
    ">": _numeric(operator.gt), ">=": _numeric(operator.ge),
}
_ARITHMETIC = {
    "+": _numeric(operator.add), "-": _numeric(operator.sub),
    "*": _numeric(operator.mul), "/": _numeric(_divide),
}
_LESS_EQUAL = _COMPARISONS["<="]


def _and3(a, b):
    if a is False or b is False:
        return False
    if a is None or b is None:
        return None
    return True


def _not3(value):
    return None if value is None else not value


# -- LIKE ------------------------------------------------------------------------------

class _LikePattern:
    """A LIKE pattern as fixed-width segments between C{%} wildcards.

    Matching each segment at its leftmost possible place is exact for patterns whose
    only variable-width wildcard is C{%}, so no backtracking is ever needed.
    """

    __slots__ = ("_exact", "_head", "_middle", "_tail", "_tail_width")

    def __init__(self, segments):
        # segments: one list of regex elements (each matching one character) per run
        # between two '%'; a single segment means the pattern has no '%'.
        compiled = [re.compile("".join(s), re.DOTALL) for s in segments]
        self._exact = compiled[0] if len(segments) == 1 else None
        self._head = compiled[0] if segments[0] else None
        self._middle = [c for c, s in zip(compiled[1:-1], segments[1:-1]) if s]
        self._tail = compiled[-1] if len(segments) > 1 and segments[-1] else None
        self._tail_width = len(segments[-1])

    def matches(self, text):
        """C{True} when C{text} matches the whole pattern."""
        if self._exact is not None:
            return self._exact.fullmatch(text) is not None
        position = 0
        if self._head is not None:
            found = self._head.match(text)
            if found is None:
                return False
            position = found.end()
        for segment in self._middle:
            found = segment.search(text, position)
            if found is None:
                return False
            position = found.end()
        if self._tail is None:
            return True
        start = len(text) - self._tail_width
        return start >= position and self._tail.fullmatch(text, start) is not None


def _like_pattern(pattern, escape, position):
    segments, current = [], []
    chars = iter(pattern)
    for char in chars:
        if escape is not None and char == escape:
            literal = next(chars, None)
            if literal is None:
                raise SelectorError(position, "the LIKE pattern ends with its escape "
                                    f"character {escape!r}")
            current.append(re.escape(literal))
        elif char == "%":
            segments.append(current)
            current = []
        elif char == "_":
            current.append(".")
        else:
            current.append(re.escape(char))
    segments.append(current)
    return _LikePattern(segments)


# -- the compiled form -----------------------------------------------------------------

class Selector:
    """A compiled selector: call L{matches} once per message.

    @ivar text: the selector as given.
    @ivar identifiers: the header fields and property names it reads (a frozenset).
    """

    __slots__ = ("text", "identifiers", "_test")

    def __init__(self, text, identifiers, test):
        self.text = text
        self.identifiers = identifiers
        self._test = test

    def __repr__(self):
        return f"<Selector {self.text!r}>"

    def evaluate(self, lookup):
        """The three-valued result, C{True}, C{False} or C{None} (UNKNOWN), for the
        values C{lookup(name)} gives (C{None} when the message has no such field)."""
        return self._test(lookup)

    def matches(self, lookup):
        """C{True} only when the selector is TRUE for the values C{lookup} gives."""
        return self._test(lookup) is True

    def accepts(self, message):
        """C{True} when broker message C{message} is selected (via L{message_field})."""
        return self._test(functools.partial(message_field, message)) is True


def compile_selector(text):
    """Parse C{text} once and return a L{Selector}.

    @raise SelectorError: a syntax error (its C{position} says where, its
        description what was expected there).
    @raise SelectorTooLong: more than L{MAX_SELECTOR_LENGTH} characters.
    @raise SelectorTooDeep: nested deeper than L{MAX_DEPTH}.
    """
    if not isinstance(text, str):
        raise SelectorError(0, f"a selector is text, not {type(text).__name__}")
    if len(text) > MAX_SELECTOR_LENGTH:
        raise SelectorTooLong(MAX_SELECTOR_LENGTH,
                              f"the selector is {len(text)} characters long; at most "
                              f"{MAX_SELECTOR_LENGTH} are allowed")
    parser = _Parser(text)
    test = parser.parse()     # collects the identifiers as it goes
    return Selector(text, frozenset(parser.identifiers), test)


def message_field(message, name):
    """What selector identifier C{name} is for broker message C{message} (S2.8).

    Header fields come from the L{BrokerMessage} routing fields; C{JMSType} and
    C{JMSTimestamp} from the payload's C{properties.subject} / C{.creation_time} and
    other identifiers from its C{application_properties} map, when the payload has
    them (duck typing: an L{mqgate.amqp.message.EncodedMessage} does). A payload whose
    properties cannot be decoded has none.

    @return: the value, or C{None} (SQL NULL).
    """
    getter = _HEADER_GETTERS.get(name)
    if getter is not None:
        return getter(message)
    try:
        properties = getattr(message.payload, "application_properties", None)
    except MqgateError:
        return None
    return None if properties is None else properties.get(name)


def _payload_property(field):
    def getter(message):
        properties = getattr(message.payload, "properties", None)
        return getattr(properties, field, None)
    return getter


def _expiration(message):
    # JMS: 0 means "never expires"; otherwise milliseconds on the broker clock's scale.
    expiry = message.expiry
    return 0 if expiry is None else int(expiry * 1000)


_HEADER_GETTERS = {
    "JMSPriority": operator.attrgetter("priority"),
    "JMSMessageID": operator.attrgetter("message_id"),
    "JMSCorrelationID": operator.attrgetter("correlation_id"),
    "JMSDeliveryMode": lambda m: "PERSISTENT" if m.durable else "NON_PERSISTENT",
    "JMSExpiration": _expiration,
    "JMSType": _payload_property("subject"),
    "JMSTimestamp": _payload_property("creation_time"),
}


# -- tokens ----------------------------------------------------------------------------

class _Token(collections.namedtuple("_Token", "kind value position")):
    # kind: "number", "string", "identifier", "keyword", "op" or "end".
    __slots__ = ()

    def describe(self):
        if self.kind == "end":
            return "end of selector"
        if self.kind == "op":
            return repr(self.value)
        if self.kind == "keyword":
            return self.value
        return f"{self.kind} {self.value!r}"

    def is_op(self, value):
        return self.kind == "op" and self.value == value

    def is_keyword(self, value):
        return self.kind == "keyword" and self.value == value


def _tokenize(text):
    tokens = []
    position, end = 0, len(text)
    while position < end:
        char = text[position]
        if char in _WHITESPACE:
            position += 1
        elif char == "'":
            position = _read_string(text, position, tokens)
        elif char in _DIGITS or (char == "." and _NUMBER.match(text, position)):
            position = _read_number(text, position, tokens)
        elif found := _IDENTIFIER.match(text, position):
            word = found.group()
            if word.upper() in _KEYWORDS:
                tokens.append(_Token("keyword", word.upper(), position))
            else:
                tokens.append(_Token("identifier", word, position))
            position = found.end()
        elif found := _OPERATOR.match(text, position):
            tokens.append(_Token("op", found.group(), position))
            position = found.end()
        else:
            raise SelectorError(position, f"unexpected character {char!r}")
    tokens.append(_Token("end", None, end))
    return tokens


def _read_string(text, start, tokens):
    found = _STRING.match(text, start)
    if found is None:
        raise SelectorError(start, "unterminated string literal")
    tokens.append(_Token("string", found.group(1).replace("''", "'"), start))
    return found.end()


def _read_number(text, start, tokens):
    found = _NUMBER.match(text, start)
    end = found.end()
    if _NUMBER_TAIL.match(text, end):
        raise SelectorError(end, f"malformed number {text[start:end + 1]!r}")
    literal = found.group()
    exact = "." not in literal and found.group(2) is None
    tokens.append(_Token("number", int(literal) if exact else float(literal), start))
    return end


# -- parser ----------------------------------------------------------------------------

# What an expression can stand for, checked while parsing so that "a + 1" or "'x'" is
# refused where a condition is needed (JMS: a selector is a conditional expression).
_CONDITION, _VALUE, _EITHER = "condition", "value", "either"
_NOT_CONSTANT = object()


#: A parsed expression: its closure, what it stands for, its nesting height, where it
#: starts in the text, and its value when it is a literal.
_Expr = collections.namedtuple("_Expr", "fn kind height position const",
                               defaults=(_NOT_CONSTANT,))


class _Parser:
    """Recursive descent over the JMS grammar; each rule returns an L{_Expr}.

    Precedence, loosest first: OR, AND, NOT, predicates (comparison, BETWEEN, IN,
    LIKE, IS NULL), + -, * /, unary + -.
    """

    def __init__(self, text):
        self.tokens = _tokenize(text)
        self.index = 0
        self.nesting = 0
        self.identifiers = set()

    def parse(self):
        """The whole selector as a test function C{lookup -> True/False/None}."""
        expr = self.or_expr()
        token = self.peek()
        if token.kind != "end":
            self.fail("AND, OR or the end of the selector", token)
        return self.condition(expr).fn

    # -- helpers ----------------------------------------------------------------------

    def peek(self):
        return self.tokens[self.index]

    def take(self):
        token = self.tokens[self.index]
        if token.kind != "end":
            self.index += 1
        return token

    def accept_keyword(self, word):
        if self.peek().is_keyword(word):
            self.index += 1
            return True
        return False

    def expect(self, check, value, expected):
        token = self.peek()
        if not check(token, value):
            self.fail(expected, token)
        self.index += 1
        return token

    def fail(self, expected, token):
        raise SelectorError(token.position,
                            f"expected {expected}, found {token.describe()}")

    def enter(self, token):
        self.nesting += 1
        if self.nesting > MAX_DEPTH:
            raise SelectorTooDeep(token.position,
                                  f"nested more than {MAX_DEPTH} levels deep")

    def node(self, fn, kind, children, position):
        height = 1 + max(child.height for child in children)
        if height > MAX_DEPTH:
            raise SelectorTooDeep(position, f"nested more than {MAX_DEPTH} levels deep")
        return _Expr(fn, kind, height, position)

    def condition(self, expr):
        """C{expr} as a three-valued test; a plain value there is a syntax error."""
        if expr.kind == _CONDITION:
            return expr
        if expr.kind == _VALUE:
            raise SelectorError(expr.position, "expected a condition (a comparison, "
                                "LIKE, IN, BETWEEN, IS NULL or a boolean), found a value")
        fn = expr.fn

        def truth(lookup):
            value = fn(lookup)
            return value if type(value) is bool else None
        return _Expr(truth, _CONDITION, expr.height, expr.position)

    def operand(self, expr, what="a number"):
        if expr.kind == _CONDITION:
            raise SelectorError(expr.position, f"expected {what}, found a condition")
        return expr

    # -- conditions -------------------------------------------------------------------

    def or_expr(self):
        return self.chain("OR", self.and_expr, True)

    def and_expr(self):
        return self.chain("AND", self.not_expr, False)

    def chain(self, word, parse_term, decisive):
        # One flat node for "a OR b OR c ...", so long generated chains are not deep.
        first = parse_term()
        if not self.peek().is_keyword(word):
            return first
        terms = [self.condition(first)]
        while self.accept_keyword(word):
            terms.append(self.condition(parse_term()))
        return self.node(_chain([t.fn for t in terms], decisive), _CONDITION, terms,
                         first.position)

    def not_expr(self):
        token = self.peek()
        if not self.accept_keyword("NOT"):
            return self.predicate()
        self.enter(token)
        operand = self.condition(self.not_expr())
        self.nesting -= 1
        return self.node(_negation(operand.fn), _CONDITION, (operand,), token.position)

    def predicate(self):
        left = self.additive()
        token = self.peek()
        if token.kind == "op" and token.value in _COMPARISONS:
            self.index += 1
            right = self.additive()
            return self.node(_binary(_COMPARISONS[token.value], left.fn, right.fn),
                             _CONDITION, (left, right), left.position)
        negated = token.is_keyword("NOT")
        if negated:
            self.index += 1
            token = self.peek()
        if self.accept_keyword("BETWEEN"):
            expr = self.between(left)
        elif self.accept_keyword("IN"):
            expr = self.in_list(left)
        elif self.accept_keyword("LIKE"):
            expr = self.like(left)
        elif negated:
            self.fail("BETWEEN, IN or LIKE after NOT", token)
        elif self.accept_keyword("IS"):
            return self.is_null(left)
        else:
            return left
        if negated:
            expr = expr._replace(fn=_negation(expr.fn))
        return expr

    def between(self, subject):
        self.operand(subject)
        low = self.operand(self.additive())
        self.expect(_Token.is_keyword, "AND", "AND (of BETWEEN ... AND ...)")
        high = self.operand(self.additive())
        value, low_fn, high_fn = subject.fn, low.fn, high.fn

        def between(lookup):
            v = value(lookup)
            return _and3(_LESS_EQUAL(low_fn(lookup), v), _LESS_EQUAL(v, high_fn(lookup)))
        return self.node(between, _CONDITION, (subject, low, high), subject.position)

    def in_list(self, subject):
        self.expect(_Token.is_op, "(", "'(' after IN")
        by_kind = {}
        while True:
            value = self.list_literal()
            by_kind.setdefault(_kind(value), set()).add(value)
            if not self.peek().is_op(","):
                break
            self.index += 1
        self.expect(_Token.is_op, ")", "',' or ')' in the IN list")
        by_kind = {kind: frozenset(values) for kind, values in by_kind.items()}
        only_kind = next(iter(by_kind)) if len(by_kind) == 1 else None
        fn = subject.fn

        def member(lookup):
            value = fn(lookup)
            if value is None:
                return None
            kind = _kind(value)
            values = by_kind.get(kind)
            if values is None:
                return None
            if value in values:
                return True
            # x IN (a, b) is x = a OR x = b: an unlike item makes "no" UNKNOWN.
            return False if kind is only_kind else None
        return self.node(member, _CONDITION, (subject,), subject.position)

    def list_literal(self):
        token = self.take()
        sign = 1
        if token.is_op("-") or token.is_op("+"):
            sign = -1 if token.value == "-" else 1
            token = self.take()
            if token.kind != "number":
                self.fail("a number after the sign", token)
        if token.kind == "number":
            return sign * token.value
        if token.kind == "string":
            return token.value
        self.fail("a string or number literal in the IN list", token)

    def like(self, subject):
        token = self.expect(lambda t, _: t.kind == "string", None,
                            "a string literal (the LIKE pattern)")
        escape = None
        if self.accept_keyword("ESCAPE"):
            escape_token = self.take()
            if escape_token.kind != "string" or len(escape_token.value) != 1:
                self.fail("a one-character string after ESCAPE", escape_token)
            escape = escape_token.value
        pattern = _like_pattern(token.value, escape, token.position)
        fn = subject.fn

        def like(lookup):
            value = fn(lookup)
            if _kind(value) is not _STR:
                return None
            return pattern.matches(value)
        return self.node(like, _CONDITION, (subject,), subject.position)

    def is_null(self, subject):
        negated = self.accept_keyword("NOT")
        after = "IS NOT" if negated else "IS"
        self.expect(_Token.is_keyword, "NULL", f"NULL after {after}")
        fn = subject.fn

        def is_null(lookup):
            return (fn(lookup) is None) is not negated
        return self.node(is_null, _CONDITION, (subject,), subject.position)

    # -- values -----------------------------------------------------------------------

    def additive(self):
        return self.arithmetic(("+", "-"), self.multiplicative)

    def multiplicative(self):
        return self.arithmetic(("*", "/"), self.unary)

    def arithmetic(self, ops, parse_operand):
        left = parse_operand()
        while self.peek().kind == "op" and self.peek().value in ops:
            op = self.take().value
            right = self.operand(parse_operand())
            self.operand(left)
            left = self.node(_binary(_ARITHMETIC[op], left.fn, right.fn), _VALUE,
                             (left, right), left.position)
        return left

    def unary(self):
        token = self.peek()
        if not (token.is_op("-") or token.is_op("+")):
            return self.primary()
        self.index += 1
        self.enter(token)
        operand = self.operand(self.unary())
        self.nesting -= 1
        if token.value == "+":
            return operand
        if _kind(operand.const) is _NUM:
            return _literal(-operand.const, _VALUE, token.position)
        fn = operand.fn

        def negative(lookup):
            value = fn(lookup)
            return -value if _kind(value) is _NUM else None
        return self.node(negative, _VALUE, (operand,), token.position)

    def primary(self):
        token = self.take()
        kind = token.kind
        if kind == "number" or kind == "string":
            return _literal(token.value, _VALUE, token.position)
        if kind == "identifier":
            name = token.value
            self.identifiers.add(name)
            return _Expr(lambda lookup: lookup(name), _EITHER, 1, token.position)
        if token.is_keyword("TRUE") or token.is_keyword("FALSE"):
            return _literal(token.value == "TRUE", _CONDITION, token.position)
        if token.is_keyword("NULL"):
            return _literal(None, _EITHER, token.position)
        if token.is_op("("):
            self.enter(token)
            expr = self.or_expr()
            self.expect(_Token.is_op, ")", "')'")
            self.nesting -= 1
            return expr
        self.fail("an identifier, a literal or '('", token)


def _literal(value, kind, position):
    return _Expr(lambda lookup: value, kind, 1, position, const=value)


def _negation(test):
    return lambda lookup: _not3(test(lookup))


def _binary(combine, left, right):
    return lambda lookup: combine(left(lookup), right(lookup))


def _chain(tests, decisive):
    # AND (decisive FALSE) or OR (decisive TRUE) over any number of terms, three-valued:
    # a decisive term decides at once, otherwise any UNKNOWN makes the result UNKNOWN.
    tests = tuple(tests)
    otherwise = not decisive

    def chain(lookup):
        result = otherwise
        for test in tests:
            value = test(lookup)
            if value is decisive:
                return decisive
            if value is None:
                result = None
        return result
    return chain
