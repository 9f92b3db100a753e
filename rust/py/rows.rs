//! Stored message rows decoded into Python `Message` objects in one pass: their JSON texts
//! parsed straight into Python values (what `json.loads` returns for them), the objects
//! filled in without their constructors, as `threadrecall.storage.rows.messages_of` does.
//!
//! A row is a `MessageRow` `(id, thread_id, resource_id, created_at µs, seq, payload JSON)`
//! or a `ColumnRow` `(id, thread_id, resource_id, created_at µs, seq, role, type, content
//! JSON, metadata JSON)`. Whatever this parser does not take as Python's decoder would (a
//! lone surrogate escape, a syntax error, deep nesting, a payload without its keys) makes the
//! whole call return `None`, and the caller decodes those rows itself.

use pyo3::exceptions::PyTypeError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple, PyType};

use super::objects::{set_attr, Blank};

/// Nesting beyond which the rows are left to Python's decoder (and its recursion limit).
const MAX_DEPTH: usize = 256;

/// Why a text was not decoded here.
enum Skip {
    /// Not taken by this parser: the caller decodes the rows.
    Unsupported,
    /// Raised by Python while building a value.
    Raised(PyErr),
}

impl From<PyErr> for Skip {
    fn from(err: PyErr) -> Self {
        Skip::Raised(err)
    }
}

type Parsed<'py> = Result<Bound<'py, PyAny>, Skip>;

/// The messages of `rows`, oldest first as given, or `None` when one of their JSON texts is
/// left to Python. `kinds` is `(Message, MessageContent, epoch, timedelta)`, the epoch being
/// 1970-01-01 in UTC.
#[pyfunction]
pub(crate) fn stored_messages<'py>(
    py: Python<'py>,
    rows: &Bound<'py, PyAny>,
    kinds: &Bound<'py, PyTuple>,
) -> PyResult<Option<Bound<'py, PyList>>> {
    let Ok(rows) = rows.cast::<PyList>() else {
        return Ok(None);
    };
    let [message, content, epoch, delta]: [Bound<'py, PyAny>; 4] =
        kinds.iter().collect::<Vec<_>>().try_into().map_err(|_| {
            PyTypeError::new_err("kinds must be (Message, MessageContent, epoch, timedelta)")
        })?;
    let make_message = Blank::of(message.cast::<PyType>()?)?;
    let make_content = Blank::of(content.cast::<PyType>()?)?;
    let clock = Clock {
        datetime: epoch.get_type().into_any(),
        utc: epoch.getattr(intern!(py, "tzinfo"))?,
        epoch,
        delta,
    };
    let names = Names::new(py);
    let mut keys = Keys::default();
    let out = PyList::empty(py);
    for row in rows.iter() {
        let Ok(row) = row.cast_into::<PyTuple>() else {
            return Ok(None);
        };
        let (role, type_, stored, metadata) = match row.len() {
            9 => {
                let stored = match parse(py, &mut keys, &row.get_item(7)?) {
                    Ok(value) => value,
                    Err(skip) => return skipped(skip),
                };
                let metadata = match parse(py, &mut keys, &row.get_item(8)?) {
                    Ok(value) => value,
                    Err(skip) => return skipped(skip),
                };
                (row.get_item(5)?, row.get_item(6)?, stored, metadata)
            }
            6 => {
                let body = match parse(py, &mut keys, &row.get_item(5)?) {
                    Ok(value) => value,
                    Err(skip) => return skipped(skip),
                };
                let Ok(body) = body.cast_into::<PyDict>() else {
                    return Ok(None);
                };
                let (Some(role), Some(type_), Some(stored), Some(metadata)) = (
                    body.get_item(&names.role)?,
                    body.get_item(&names.type_)?,
                    body.get_item(&names.content)?,
                    body.get_item(&names.metadata)?,
                ) else {
                    return Ok(None);
                };
                (role, type_, stored, metadata)
            }
            _ => return Err(PyTypeError::new_err("a stored row has 6 or 9 items")),
        };
        let Ok(stored) = stored.cast_into::<PyDict>() else {
            return Ok(None); // Python's decoder reports content that is not an object
        };
        let parts = match stored.get_item(&names.parts)? {
            Some(parts) if parts.is_truthy()? => parts,
            _ => PyList::empty(py).into_any(),
        };
        let text = match stored.get_item(&names.text)? {
            Some(text) => text,
            None => py.None().into_bound(py),
        };
        let body = make_content.make()?;
        set_attr(&body, &names.parts, &parts)?;
        set_attr(&body, &names.text, &text)?;
        let created = clock.at(&row.get_item(3)?)?;
        let made = make_message.make()?;
        set_attr(&made, &names.id, &row.get_item(0)?)?;
        set_attr(&made, &names.thread_id, &row.get_item(1)?)?;
        set_attr(&made, &names.resource_id, &row.get_item(2)?)?;
        set_attr(&made, &names.role, &role)?;
        set_attr(&made, &names.content, &body)?;
        set_attr(&made, &names.created_at, &created)?;
        set_attr(&made, &names.type_, &type_)?;
        set_attr(&made, &names.metadata, &metadata)?;
        out.append(made)?;
    }
    Ok(Some(out))
}

/// Times as the Python decoder makes them: `epoch + timedelta(microseconds=µs)`, built here
/// from the same fields (one object, not three) where the value is a date `datetime` holds,
/// else the Python way (its `OverflowError`). The fields travel as the ten bytes of
/// `datetime`'s pickled state, `datetime(state, tzinfo)`, which Python takes without parsing
/// eight arguments and making integers of them.
struct Clock<'py> {
    datetime: Bound<'py, PyAny>,
    utc: Bound<'py, PyAny>,
    epoch: Bound<'py, PyAny>,
    delta: Bound<'py, PyAny>,
}

impl<'py> Clock<'py> {
    fn at(&self, micros: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        if let Some((year, month, day, seconds, micro)) =
            micros.extract::<i64>().ok().and_then(civil)
        {
            let [y1, y0] = (year as u16).to_be_bytes();
            let [_, m2, m1, m0] = (micro as u32).to_be_bytes();
            let state = [
                y1,
                y0,
                month as u8,
                day as u8,
                (seconds / 3600) as u8,
                (seconds / 60 % 60) as u8,
                (seconds % 60) as u8,
                m2,
                m1,
                m0,
            ];
            return self
                .datetime
                .call1((PyBytes::new(self.datetime.py(), &state), &self.utc));
        }
        self.epoch.add(self.delta.call1((0, 0, micros))?)
    }
}

/// The UTC date, second of the day and microsecond of `micros` after 1970-01-01, for years 1
/// to 9999 (`datetime`'s range), by the days-to-civil algorithm of H. Hinnant.
fn civil(micros: i64) -> Option<(i64, u32, u32, i64, i64)> {
    let days = micros.div_euclid(86_400_000_000);
    let rest = micros.rem_euclid(86_400_000_000);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (1..=9999)
        .contains(&year)
        .then_some((year, month, day, rest / 1_000_000, rest % 1_000_000))
}

fn skipped<T>(skip: Skip) -> PyResult<Option<T>> {
    match skip {
        Skip::Unsupported => Ok(None),
        Skip::Raised(err) => Err(err),
    }
}

/// The attribute names (interned once per process).
struct Names<'py> {
    id: Bound<'py, PyString>,
    thread_id: Bound<'py, PyString>,
    resource_id: Bound<'py, PyString>,
    role: Bound<'py, PyString>,
    content: Bound<'py, PyString>,
    created_at: Bound<'py, PyString>,
    type_: Bound<'py, PyString>,
    metadata: Bound<'py, PyString>,
    parts: Bound<'py, PyString>,
    text: Bound<'py, PyString>,
}

impl<'py> Names<'py> {
    fn new(py: Python<'py>) -> Self {
        Names {
            id: intern!(py, "id").clone(),
            thread_id: intern!(py, "thread_id").clone(),
            resource_id: intern!(py, "resource_id").clone(),
            role: intern!(py, "role").clone(),
            content: intern!(py, "content").clone(),
            created_at: intern!(py, "created_at").clone(),
            type_: intern!(py, "type").clone(),
            metadata: intern!(py, "metadata").clone(),
            parts: intern!(py, "parts").clone(),
            text: intern!(py, "text").clone(),
        }
    }
}

/// One JSON text (a Python `str`) as the value `json.loads` makes of it.
fn parse<'py>(py: Python<'py>, keys: &mut Keys<'py>, text: &Bound<'py, PyAny>) -> Parsed<'py> {
    let Ok(text) = text.cast::<PyString>() else {
        return Err(Skip::Unsupported);
    };
    let Ok(text) = text.to_str() else {
        return Err(Skip::Unsupported);
    };
    let mut parser = Parser {
        py,
        text,
        at: 0,
        keys,
    };
    parser.space();
    let value = parser.value(0)?;
    parser.space();
    if parser.at != text.len() {
        return Err(Skip::Unsupported); // "Extra data" to Python
    }
    Ok(value)
}

/// A recursive-descent reader of the JSON Python's decoder accepts by default: RFC 8259 plus
/// `NaN`, `Infinity` and `-Infinity`.
struct Parser<'a, 'k, 'py> {
    py: Python<'py>,
    text: &'a str,
    at: usize,
    keys: &'k mut Keys<'py>,
}

/// The object keys met so far in one call, each made into a Python string once (messages
/// repeat the same few keys, as `json.loads` shares them within one text).
#[derive(Default)]
struct Keys<'py> {
    known: Vec<(String, Bound<'py, PyString>)>,
}

impl<'py> Keys<'py> {
    const MOST: usize = 64;

    fn get(&mut self, py: Python<'py>, text: &str) -> Bound<'py, PyString> {
        if let Some((_, key)) = self.known.iter().find(|(known, _)| known.as_str() == text) {
            return key.clone();
        }
        let key = PyString::new(py, text);
        if self.known.len() < Self::MOST {
            self.known.push((text.to_owned(), key.clone()));
        }
        key
    }
}

impl<'py> Parser<'_, '_, 'py> {
    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.at).copied()
    }

    fn space(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    fn eat(&mut self, word: &str) -> bool {
        if self.text[self.at..].starts_with(word) {
            self.at += word.len();
            true
        } else {
            false
        }
    }

    /// Python's decoder gives its own objects for `NaN` and the infinities (one NaN, so two
    /// decoded NaNs compare equal inside lists and dicts, where identity comes first): these.
    fn constant(&self, name: &str) -> Parsed<'py> {
        Ok(self.py.import("json.decoder")?.getattr(name)?)
    }

    fn value(&mut self, depth: usize) -> Parsed<'py> {
        let py = self.py;
        match self.peek() {
            Some(b'{') if depth < MAX_DEPTH => self.object(depth),
            Some(b'[') if depth < MAX_DEPTH => self.array(depth),
            Some(b'"') => Ok(self.string()?.into_any()),
            Some(b'-' | b'0'..=b'9') if !self.text[self.at..].starts_with("-Infinity") => {
                self.number()
            }
            _ if self.eat("null") => Ok(py.None().into_bound(py)),
            _ if self.eat("true") => Ok(PyBool::new(py, true).to_owned().into_any()),
            _ if self.eat("false") => Ok(PyBool::new(py, false).to_owned().into_any()),
            _ if self.eat("NaN") => self.constant("NaN"),
            _ if self.eat("Infinity") => self.constant("PosInf"),
            _ if self.eat("-Infinity") => self.constant("NegInf"),
            _ => Err(Skip::Unsupported),
        }
    }

    fn object(&mut self, depth: usize) -> Parsed<'py> {
        self.at += 1;
        let dict = PyDict::new(self.py);
        self.space();
        if self.peek() == Some(b'}') {
            self.at += 1;
            return Ok(dict.into_any());
        }
        loop {
            self.space();
            if self.peek() != Some(b'"') {
                return Err(Skip::Unsupported);
            }
            let key = self.key()?;
            self.space();
            if self.peek() != Some(b':') {
                return Err(Skip::Unsupported);
            }
            self.at += 1;
            self.space();
            let value = self.value(depth + 1)?;
            dict.set_item(key, value)?;
            self.space();
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b'}') => {
                    self.at += 1;
                    return Ok(dict.into_any());
                }
                _ => return Err(Skip::Unsupported),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Parsed<'py> {
        self.at += 1;
        let list = PyList::empty(self.py);
        self.space();
        if self.peek() == Some(b']') {
            self.at += 1;
            return Ok(list.into_any());
        }
        loop {
            self.space();
            list.append(self.value(depth + 1)?)?;
            self.space();
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(b']') => {
                    self.at += 1;
                    return Ok(list.into_any());
                }
                _ => return Err(Skip::Unsupported),
            }
        }
    }

    /// An object's key: a string without escapes comes from the call's `Keys`.
    fn key(&mut self) -> Result<Bound<'py, PyString>, Skip> {
        let start = self.at + 1;
        let end = self.text[start..]
            .bytes()
            .position(|b| b == b'"' || b == b'\\' || b < 0x20);
        match end {
            Some(length) if self.text.as_bytes()[start + length] == b'"' => {
                self.at = start + length + 1;
                Ok(self.keys.get(self.py, &self.text[start..start + length]))
            }
            _ => self.string(),
        }
    }

    /// A string literal from its opening quote; escapes decoded, control characters refused
    /// (as Python's strict decoder does), a lone surrogate left to Python.
    fn string(&mut self) -> Result<Bound<'py, PyString>, Skip> {
        self.at += 1;
        let bytes = self.text.as_bytes();
        let start = self.at;
        let mut owned: Option<String> = None;
        let mut plain = start; // start of the run not yet copied into `owned`
        loop {
            let Some(&byte) = bytes.get(self.at) else {
                return Err(Skip::Unsupported);
            };
            match byte {
                b'"' => {
                    let text = match owned.as_mut() {
                        Some(buffer) => {
                            buffer.push_str(&self.text[plain..self.at]);
                            PyString::new(self.py, buffer)
                        }
                        None => PyString::new(self.py, &self.text[start..self.at]),
                    };
                    self.at += 1;
                    return Ok(text);
                }
                b'\\' => {
                    let buffer = owned.get_or_insert_with(String::new);
                    buffer.push_str(&self.text[plain..self.at]);
                    let escape = *bytes.get(self.at + 1).ok_or(Skip::Unsupported)?;
                    self.at += 2;
                    match escape {
                        b'"' => buffer.push('"'),
                        b'\\' => buffer.push('\\'),
                        b'/' => buffer.push('/'),
                        b'b' => buffer.push('\u{8}'),
                        b'f' => buffer.push('\u{c}'),
                        b'n' => buffer.push('\n'),
                        b'r' => buffer.push('\r'),
                        b't' => buffer.push('\t'),
                        b'u' => {
                            let unit = self.hex4()?;
                            let code = if (0xD800..0xDC00).contains(&unit) && self.eat("\\u") {
                                let low = self.hex4()?;
                                if !(0xDC00..0xE000).contains(&low) {
                                    return Err(Skip::Unsupported);
                                }
                                0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00)
                            } else {
                                unit
                            };
                            buffer.push(char::from_u32(code).ok_or(Skip::Unsupported)?);
                        }
                        _ => return Err(Skip::Unsupported),
                    }
                    plain = self.at;
                }
                0..=0x1f => return Err(Skip::Unsupported),
                _ => self.at += 1,
            }
        }
    }

    fn hex4(&mut self) -> Result<u32, Skip> {
        let digits = self
            .text
            .get(self.at..self.at + 4)
            .ok_or(Skip::Unsupported)?;
        if !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(Skip::Unsupported);
        }
        self.at += 4;
        u32::from_str_radix(digits, 16).map_err(|_| Skip::Unsupported)
    }

    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?`: an int when it has neither fraction
    /// nor exponent (of any size, through Python's `int` beyond 64 bits), else a float.
    fn number(&mut self) -> Parsed<'py> {
        let bytes = self.text.as_bytes();
        let start = self.at;
        let digits = |at: &mut usize| {
            let from = *at;
            while bytes.get(*at).is_some_and(u8::is_ascii_digit) {
                *at += 1;
            }
            *at - from
        };
        let mut at = start + usize::from(bytes[start] == b'-');
        match bytes.get(at) {
            Some(b'0') => at += 1,
            Some(b'1'..=b'9') => {
                digits(&mut at);
            }
            _ => return Err(Skip::Unsupported),
        }
        let whole = at;
        if bytes.get(at) == Some(&b'.') {
            let mut after = at + 1;
            if digits(&mut after) > 0 {
                at = after;
            }
        }
        if matches!(bytes.get(at), Some(b'e' | b'E')) {
            let mut after = at + 1;
            if matches!(bytes.get(after), Some(b'-' | b'+')) {
                after += 1;
            }
            if digits(&mut after) > 0 {
                at = after;
            }
        }
        self.at = at;
        let literal = &self.text[start..at];
        if at == whole {
            return Ok(match literal.parse::<i64>() {
                Ok(int) => PyInt::new(self.py, int).into_any(),
                Err(_) => self.py.get_type::<PyInt>().call1((literal,))?,
            });
        }
        let float = literal.parse::<f64>().map_err(|_| Skip::Unsupported)?;
        Ok(PyFloat::new(self.py, float).into_any())
    }
}
