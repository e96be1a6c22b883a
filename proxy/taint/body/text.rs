//! Text as its reader sees it, for the body scanner's extra readings:
//! quoted-printable undone (`=2E` is a dot, `=` at a line's end joins two
//! lines, as a mail reader shows it), and HTML as a browser renders it
//! (tags that render as nothing vanish, so `<b>g05</b>.example.com` reads
//! `g05.example.com`; script and style content too; only line-breaking
//! elements such as `p`, `div`, `br` and `li` end a run).
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

/// Elements that end a line where they open or close: the text on either
/// side is not one run. Every other tag (inline, unknown, custom, longer
/// than [`NAME_MAX`], a bogus comment) joins the text around it, as a
/// browser's rendered text does (a `match`, not a list search: it runs at
/// every tag's end).
fn breaks(name: &[u8]) -> bool {
    matches!(
        name,
        b"address"
            | b"article"
            | b"aside"
            | b"blockquote"
            | b"body"
            | b"br"
            | b"caption"
            | b"center"
            | b"dd"
            | b"details"
            | b"dialog"
            | b"dir"
            | b"div"
            | b"dl"
            | b"dt"
            | b"fieldset"
            | b"figcaption"
            | b"figure"
            | b"footer"
            | b"form"
            | b"h1"
            | b"h2"
            | b"h3"
            | b"h4"
            | b"h5"
            | b"h6"
            | b"head"
            | b"header"
            | b"hgroup"
            | b"hr"
            | b"html"
            | b"legend"
            | b"li"
            | b"listing"
            | b"main"
            | b"menu"
            | b"nav"
            | b"ol"
            | b"option"
            | b"p"
            | b"plaintext"
            | b"pre"
            | b"section"
            | b"summary"
            | b"table"
            | b"tbody"
            | b"td"
            | b"tfoot"
            | b"th"
            | b"thead"
            | b"title"
            | b"tr"
            | b"ul"
    )
}

/// Elements whose content is not rendered text: skipped to their end tag.
fn skips(name: &[u8]) -> bool {
    matches!(
        name,
        b"script" | b"style" | b"template" | b"noscript" | b"xmp" | b"iframe" | b"noembed"
    )
}

/// Longest tag name kept (longer ones break nothing: they join).
const NAME_MAX: usize = 10;
/// `len` of a tag name longer than [`NAME_MAX`].
const OVERLONG: u8 = u8::MAX;

/// Where an HTML text reader is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Html {
    #[default]
    Text,
    /// After `<`.
    Open,
    /// In a tag's name (`len` bytes kept), or past it (`named`), inside
    /// quotes (`quote`: the quote byte, 0 none); `end`: a `</…>` tag.
    Tag {
        len: u8,
        named: bool,
        quote: u8,
        end: bool,
    },
    /// In a comment; `dashes`: how many `-` just came (`<!--` counts as
    /// two, so `<!-->` closes it, as browsers do).
    Comment { dashes: u8 },
    /// After `--!` in a comment: `>` closes it.
    CommentBang,
    /// After `<!` or `<!-`: a comment if `-` follows.
    Bang { dashes: u8 },
    /// Inside a script, style or template (`name` holds which): skipped
    /// up to `</name`, `matched` bytes of which have come.
    Skip { len: u8, matched: u8 },
}

/// A tag whose name is being read.
const fn tag(len: u8, end: bool) -> Html {
    Html::Tag {
        len,
        named: false,
        quote: 0,
        end,
    }
}

/// A tag past its name (a bogus comment, an end tag's rest).
const NAMED: Html = Html::Tag {
    len: 0,
    named: true,
    quote: 0,
    end: true,
};

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
/// changes is passed on: a run of name bytes that a tag, a comment or a
/// skipped script joins (`g05` + `</b>` + `.example.com`), each on a line of its
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
                Html::Skip { matched: 0, .. } => memchr::memchr(b'<', &input[i..]),
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
            (Html::Open, b'/') => tag(0, true),
            // `<?…>`: a bogus comment, rendered as nothing.
            (Html::Open, b'?') => NAMED,
            (Html::Open, b) if b.is_ascii_alphabetic() => {
                self.name[0] = b.to_ascii_lowercase();
                tag(1, false)
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
                1 => Html::Comment { dashes: 2 },
                _ => Html::Bang { dashes: 1 },
            },
            (Html::Bang { .. }, _) => NAMED,
            (Html::Comment { dashes }, b'>') if dashes >= 2 => {
                self.after_inline = true;
                Html::Text
            }
            (Html::Comment { dashes }, b'!') if dashes >= 2 => Html::CommentBang,
            (Html::Comment { dashes }, b'-') => Html::Comment {
                dashes: dashes.saturating_add(1),
            },
            (Html::CommentBang, b'-') => Html::Comment { dashes: 1 },
            (Html::CommentBang, b'>') => {
                self.after_inline = true;
                Html::Text
            }
            (Html::Comment { .. } | Html::CommentBang, _) => Html::Comment { dashes: 0 },
            (Html::Skip { len, matched }, b) => self.in_skip(len, matched, b),
            (
                Html::Tag {
                    quote: 0, len, end, ..
                },
                b'>',
            ) => self.tag_end(len, end, out)?,
            (
                Html::Tag {
                    len,
                    named,
                    quote,
                    end,
                },
                b,
            ) => self.in_tag(len, named, quote, end, b),
        })
    }

    /// A tag's `>`: a line-breaking element ends the run, any other joins;
    /// a script's (or style's) content is skipped.
    fn tag_end(&mut self, len: u8, end: bool, out: &mut Out<'_>) -> Result<Html, super::Stop> {
        let name = match len {
            OVERLONG => &[][..],
            n => &self.name[..usize::from(n)],
        };
        let (ends_line, skipped) = (breaks(name), !end && skips(name));
        if ends_line {
            self.end_run(out)?;
        } else {
            self.after_inline = true;
        }
        Ok(if skipped {
            Html::Skip { len, matched: 0 }
        } else {
            Html::Text
        })
    }

    /// A byte inside skipped content: looking for `</` and the name.
    fn in_skip(&mut self, len: u8, matched: u8, b: u8) -> Html {
        let want = match matched {
            0 => Some(b'<'),
            1 => Some(b'/'),
            m => self.name[..usize::from(len)]
                .get(usize::from(m) - 2)
                .copied(),
        };
        match want {
            Some(w) if b.to_ascii_lowercase() == w => {
                if usize::from(matched) == usize::from(len) + 1 {
                    // `</name` seen: the end tag's rest, then text.
                    NAMED
                } else {
                    Html::Skip {
                        len,
                        matched: matched + 1,
                    }
                }
            }
            _ if b == b'<' => Html::Skip { len, matched: 1 },
            _ => Html::Skip { len, matched: 0 },
        }
    }

    /// A byte inside a tag: its name, then attributes (quotes may hold `>`).
    fn in_tag(&mut self, len: u8, named: bool, quote: u8, end: bool, b: u8) -> Html {
        let mut len = len;
        let named = named || !(b.is_ascii_alphanumeric() || b == b'-');
        if !named && len != OVERLONG {
            if usize::from(len) < NAME_MAX {
                self.name[usize::from(len)] = b.to_ascii_lowercase();
                len += 1;
            } else {
                len = OVERLONG;
            }
        }
        let quote = match (quote, b) {
            (0, b'"' | b'\'') => b,
            (q, b) if q == b => 0,
            (q, _) => q,
        };
        Html::Tag {
            len,
            named,
            quote,
            end,
        }
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
        let cases: [(&[u8], &str); 22] = [
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
            (b"a<br>b<div>c", ""),
            // Everything that renders as nothing joins (review finds).
            (b"e20<script>x.y</script>.example.com", "e20.example.com"),
            (b"e21<x></x>.example.com", "e21.example.com"),
            (b"e22<var></var>.example.com", "e22.example.com"),
            (b"e23<!-->.example.com", "e23.example.com"),
            (b"e24<?x>.example.com", "e24.example.com"),
            (b"e25<!x>.example.com", "e25.example.com"),
            (b"e27<wbr>.example.com", "e27.example.com"),
            (
                b"e28<my-element></my-element>.example.com",
                "e28.example.com",
            ),
            (b"e29</ x>.example.com", "e29.example.com"),
            (b"e35<img src=x>.example.com", "e35.example.com"),
            (b"e37<!-- x --!>.example.com", "e37.example.com"),
            (b"e38<style>p{}</style>.example.com", "e38.example.com"),
            (
                b"e39<verylongtagname></verylongtagname>.example.com",
                "e39.example.com",
            ),
            (b"e40<SCRIPT>a</b></SCRIPT >.example.com", "e40.example.com"),
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
