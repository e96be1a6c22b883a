//! Text as its reader sees it, for the body scanner's extra readings:
//! quoted-printable undone (`=2E` is a dot, `=` at a line's end joins two
//! lines, as a mail reader shows it), and HTML as a browser renders it
//! (inline tags and comments vanish, so `<b>g05</b>.example.com` reads
//! `g05.example.com`; other tags end a line).
//!
//! Must not: fail, buffer beyond one step, or be the only reading of a
//! body (attributes, URLs in tags and the raw text are the first
//! reading's; these only add what a reader would see joined).

use super::coding::OUT_BUF;
use super::Flow;

/// Stack output, flushed when full.
struct Out<'a> {
    buf: [u8; OUT_BUF],
    len: usize,
    down: &'a mut dyn FnMut(&[u8]) -> Flow,
}

impl Out<'_> {
    fn push(&mut self, b: u8) -> Flow {
        if self.len == self.buf.len() {
            self.flush()?;
        }
        self.buf[self.len] = b;
        self.len += 1;
        Ok(())
    }
    fn flush(&mut self) -> Flow {
        let n = std::mem::take(&mut self.len);
        if n > 0 {
            (self.down)(&self.buf[..n])?;
        }
        Ok(())
    }
}

fn hex(b: u8) -> Option<u8> {
    (b as char).to_digit(16).map(|d| d as u8)
}

/// Where a quoted-printable decoder is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Qp {
    #[default]
    Plain,
    /// After `=`.
    Eq,
    /// After `=` and one hex digit.
    Eq1(u8),
    /// After `=\r`.
    EqCr,
}

/// Quoted-printable (RFC 2045 6.7), split-safe across chunks.
#[derive(Default)]
pub(super) struct QuotedPrintable {
    state: Qp,
}

impl QuotedPrintable {
    pub(super) fn decode(&mut self, input: &[u8], down: &mut dyn FnMut(&[u8]) -> Flow) -> Flow {
        let mut out = Out {
            buf: [0; OUT_BUF],
            len: 0,
            down,
        };
        for &b in input {
            self.state = match (self.state, b) {
                (Qp::Plain, b'=') => Qp::Eq,
                (Qp::Plain, b) => {
                    out.push(b)?;
                    Qp::Plain
                }
                (Qp::Eq, b'\r') => Qp::EqCr,
                (Qp::Eq | Qp::EqCr, b'\n') => Qp::Plain,
                (Qp::Eq, b) if hex(b).is_some() => Qp::Eq1(b),
                (Qp::Eq1(h), b) if hex(b).is_some() => {
                    out.push(hex(h).unwrap_or(0) << 4 | hex(b).unwrap_or(0))?;
                    Qp::Plain
                }
                // Not an escape: what was read stays as it was.
                (Qp::Eq, b) => {
                    out.push(b'=')?;
                    out.push(b)?;
                    Qp::Plain
                }
                (Qp::Eq1(h), b) => {
                    out.push(b'=')?;
                    out.push(h)?;
                    out.push(b)?;
                    Qp::Plain
                }
                (Qp::EqCr, b) => {
                    out.push(b)?;
                    Qp::Plain
                }
            };
        }
        out.flush()
    }
}

/// Inline elements: a browser renders the text on both sides as one run
/// (a `match`, not a list search: it runs at every tag's end).
fn inline(name: &[u8]) -> bool {
    matches!(
        name,
        b"a" | b"abbr"
            | b"b"
            | b"bdi"
            | b"bdo"
            | b"big"
            | b"cite"
            | b"code"
            | b"data"
            | b"del"
            | b"dfn"
            | b"em"
            | b"font"
            | b"i"
            | b"ins"
            | b"kbd"
            | b"label"
            | b"mark"
            | b"q"
            | b"s"
            | b"samp"
            | b"small"
            | b"span"
            | b"strike"
            | b"strong"
            | b"sub"
            | b"sup"
            | b"time"
            | b"tt"
            | b"u"
    )
}

/// Longest tag name kept (longer ones are not inline).
const NAME_MAX: usize = 8;

/// Where an HTML text reader is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Html {
    #[default]
    Text,
    /// After `<`.
    Open,
    /// In a tag's name (`len` bytes kept), or past it (`named`), inside
    /// quotes (`quote`: the quote byte, 0 none).
    Tag { len: u8, named: bool, quote: u8 },
    /// In a comment; `dashes`: how many `-` just came.
    Comment { dashes: u8 },
    /// After `<!` or `<!-`: a comment if `-` follows.
    Bang { dashes: u8 },
}

/// Bytes a name (or a URL or an address around it) can be made of, escapes
/// included: what an inline tag inside it joins.
fn joins(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || b >= 0x80
        || matches!(
            b,
            b'-' | b'.' | b'_' | b'&' | b'#' | b';' | b'%' | b'\\' | b':' | b'/' | b'@'
        )
}

/// A run longer than this is no name: only its end is kept.
const RUN_MAX: usize = 512;

/// HTML's rendered text, split-safe across chunks. Only what rendering
/// changes is passed on: a run of name bytes that an inline tag or a
/// comment joins (`g05` + `</b>` + `.example.com`), each on a line of its
/// own. Text without such a join is the first reading's alone, so this
/// reading costs one `memchr` pass over text and a step through each tag.
#[derive(Default)]
pub(super) struct HtmlText {
    state: Html,
    name: [u8; NAME_MAX],
    /// The run of name bytes being read (its last [`RUN_MAX`] bytes).
    run: Vec<u8>,
    /// An inline tag or comment ended, no text since.
    after_inline: bool,
    /// The run was joined by one: it is passed on as it grows.
    joined: bool,
}

impl HtmlText {
    pub(super) fn decode(&mut self, input: &[u8], down: &mut dyn FnMut(&[u8]) -> Flow) -> Flow {
        let mut out = Out {
            buf: [0; OUT_BUF],
            len: 0,
            down,
        };
        let mut i = 0;
        while i < input.len() {
            // Jump to the next byte that can change the state.
            let skip = match self.state {
                Html::Text => {
                    let k = memchr::memchr(b'<', &input[i..]).map_or(input.len(), |k| i + k);
                    self.text(&input[i..k], &mut out)?;
                    i = k;
                    if k < input.len() {
                        self.state = Html::Open;
                        i += 1;
                    }
                    continue;
                }
                Html::Tag {
                    named: true,
                    quote: 0,
                    ..
                } => memchr::memchr3(b'>', b'"', b'\'', &input[i..]),
                Html::Tag { quote, .. } if quote != 0 => memchr::memchr(quote, &input[i..]),
                Html::Comment { dashes: 0 } => memchr::memchr(b'-', &input[i..]),
                _ => Some(0),
            };
            match skip {
                Some(k) => i += k,
                None => return out.flush(),
            }
            self.state = self.step(input[i], &mut out)?;
            i += 1;
        }
        out.flush()
    }

    /// Rendered text between tags.
    fn text(&mut self, t: &[u8], out: &mut Out<'_>) -> Flow {
        if t.is_empty() {
            return Ok(());
        }
        let joins_start = self.after_inline && !self.run.is_empty();
        if !self.joined && !joins_start {
            // Nothing joins at its start: only its last run matters.
            self.after_inline = false;
            match t.iter().rposition(|&b| !joins(b)) {
                Some(last) => {
                    self.run.clear();
                    return self.grow(&t[last + 1..], out);
                }
                None => return self.grow(t, out),
            }
        }
        let first_break = t.iter().position(|&b| !joins(b));
        let lead = &t[..first_break.unwrap_or(t.len())];
        if self.after_inline && !self.run.is_empty() && !lead.is_empty() && !self.joined {
            self.joined = true;
            for &b in &self.run {
                out.push(b)?;
            }
        }
        self.after_inline = false;
        self.grow(lead, out)?;
        let Some(k) = first_break else {
            return Ok(());
        };
        self.end_run(out)?;
        let last_break = t.iter().rposition(|&b| !joins(b)).unwrap_or(k);
        self.grow(&t[last_break + 1..], out)
    }

    /// The run grows by `bytes` (passed on once joined).
    fn grow(&mut self, bytes: &[u8], out: &mut Out<'_>) -> Flow {
        if self.joined {
            for &b in bytes {
                out.push(b)?;
            }
        }
        self.run.extend_from_slice(bytes);
        if self.run.len() > RUN_MAX {
            self.run.drain(..self.run.len() - RUN_MAX);
        }
        Ok(())
    }

    /// The run ends (a break in the text, or a tag that ends a line).
    fn end_run(&mut self, out: &mut Out<'_>) -> Flow {
        if std::mem::take(&mut self.joined) {
            out.push(b'\n')?;
        }
        self.run.clear();
        self.after_inline = false;
        Ok(())
    }

    fn step(&mut self, b: u8, out: &mut Out<'_>) -> Result<Html, super::Stop> {
        Ok(match (self.state, b) {
            (Html::Text, _) => Html::Text,
            (Html::Open, b'!') => Html::Bang { dashes: 0 },
            (Html::Open, b'/') => Html::Tag {
                len: 0,
                named: false,
                quote: 0,
            },
            (Html::Open, b) if b.is_ascii_alphabetic() => {
                self.name[0] = b.to_ascii_lowercase();
                Html::Tag {
                    len: 1,
                    named: false,
                    quote: 0,
                }
            }
            // `<` that starts no tag is text (and breaks a run).
            (Html::Open, b'<') => {
                self.text(b"<", out)?;
                Html::Open
            }
            (Html::Open, b) => {
                self.text(&[b'<', b], out)?;
                Html::Text
            }
            (Html::Bang { dashes }, b'-') if dashes < 2 => match dashes {
                1 => Html::Comment { dashes: 0 },
                _ => Html::Bang { dashes: 1 },
            },
            (Html::Bang { .. }, _) => Html::Tag {
                len: 0,
                named: true,
                quote: 0,
            },
            (Html::Comment { dashes }, b'>') if dashes >= 2 => {
                self.after_inline = true;
                Html::Text
            }
            (Html::Comment { dashes }, b'-') => Html::Comment {
                dashes: dashes.saturating_add(1),
            },
            (Html::Comment { .. }, _) => Html::Comment { dashes: 0 },
            (Html::Tag { quote: 0, len, .. }, b'>') => {
                if inline(&self.name[..usize::from(len)]) {
                    self.after_inline = true;
                } else {
                    self.end_run(out)?;
                }
                Html::Text
            }
            (Html::Tag { len, named, quote }, b) => self.in_tag(len, named, quote, b),
        })
    }

    /// A byte inside a tag: its name, then attributes (quotes may hold `>`).
    fn in_tag(&mut self, len: u8, named: bool, quote: u8, b: u8) -> Html {
        let mut len = len;
        let named = named || !(b.is_ascii_alphanumeric());
        if !named {
            if usize::from(len) < NAME_MAX {
                self.name[usize::from(len)] = b.to_ascii_lowercase();
                len += 1;
            } else {
                // Too long to be inline: never matches.
                len = 0;
            }
        }
        let quote = match (quote, b) {
            (0, b'"' | b'\'') => b,
            (q, b) if q == b => 0,
            (q, _) => q,
        };
        Html::Tag { len, named, quote }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Decode<'a> = &'a mut dyn FnMut(&[u8], &mut dyn FnMut(&[u8]) -> Flow) -> Flow;

    fn run(decode: Decode<'_>, text: &[u8], chunk: usize) -> String {
        let mut got = Vec::new();
        for c in text.chunks(chunk) {
            decode(c, &mut |o| {
                got.extend_from_slice(o);
                Ok(())
            })
            .unwrap();
        }
        String::from_utf8_lossy(&got).into_owned()
    }

    #[test]
    fn quoted_printable_as_a_mail_reader_shows_it() {
        let cases: [(&[u8], &str); 5] = [
            (b"paste=2Eexample=2ecom", "paste.example.com"),
            (b"paste.exa=\r\nmple.com", "paste.example.com"),
            (b"paste.exa=\nmple.com", "paste.example.com"),
            (b"a=b c=4 d=ZZ", "a=b c=4 d=ZZ"),
            (b"x=3D1", "x=1"),
        ];
        for (qp, want) in cases {
            for chunk in [1, 2, 3, 64] {
                let mut d = QuotedPrintable::default();
                assert_eq!(
                    run(&mut |i, o| d.decode(i, o), qp, chunk),
                    want,
                    "{qp:?}/{chunk}"
                );
            }
        }
    }

    #[test]
    fn html_as_a_browser_renders_it() {
        // Only runs that an inline tag or a comment joins are passed on.
        let cases: [(&[u8], &str); 8] = [
            (b"<b>g05</b>.example.com", "g05.example.com"),
            (
                b"<span class=\"x>y\">paste</span><!-- hi -->.<i>example</i>.com",
                "paste.example.com",
            ),
            (
                b"send to https://<b>evil</b>.example.com/x now",
                "https://evil.example.com/x\n",
            ),
            (b"end.</p><p>Next", ""),
            (b"a < b and c<3", ""),
            (b"<SPAN>x</SPAN>.<Strong>y</Strong>.com", "x.y.com"),
            (b"plain text with x.example.com only", ""),
            (b"a<br>b<verylongtagname>c", ""),
        ];
        for (html, want) in cases {
            for chunk in [1, 2, 5, 64] {
                let mut d = HtmlText::default();
                assert_eq!(
                    run(&mut |i, o| d.decode(i, o), html, chunk),
                    want,
                    "{html:?}/{chunk}"
                );
            }
        }
    }
}
