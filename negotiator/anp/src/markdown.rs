//! A small, line-based reader for protocol documents.
//!
//! Protocol documents are written by language models and by people, so the reader is forgiving
//! about form and exact about content: it knows ATX headings (`#` … `######`), fenced code blocks
//! (```` ``` ```` or `~~~`, up to three spaces of indent) and *unfenced* JSON values that start at
//! the beginning of a line (seed 002's own example puts its schemas and test data in the text
//! without fences). Everything else is plain text lines. A full CommonMark parser would add
//! nothing here: no other markdown construct carries meaning for a protocol.

use serde_json::Value;

/// One piece of a document, in document order. Line numbers are 1-based.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Element {
    Heading {
        level: usize,
        text: String,
        line: usize,
    },
    /// A JSON value: a fenced block (any info string, or none, whose body parses as JSON, or
    /// whose info string says `json` even when it does not parse) or an unfenced value.
    Json {
        value: Result<Value, String>,
        line: usize,
        /// The info string of the fence (`json`, `jsonc`, …), empty for an unfenced value.
        lang: String,
    },
    /// A fenced block that is not JSON (e.g. ```` ```js ````). Kept so sections can quote it.
    Code {
        line: usize,
    },
    Text {
        text: String,
        line: usize,
    },
}

/// Splits `text` into [`Element`]s.
pub(crate) fn elements(text: &str) -> Vec<Element> {
    let lines: Vec<(usize, &str)> = line_offsets(text);
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let (offset, raw) = lines[i];
        let line_no = i + 1;
        let trimmed = raw.trim_end_matches(['\r', '\n']);
        if let Some((fence, lang)) = fence_open(trimmed) {
            let (element, next) = fenced_block(&lines, i, &fence, &lang);
            out.push(element);
            i = next;
            continue;
        }
        if let Some((level, heading)) = heading(trimmed) {
            out.push(Element::Heading {
                level,
                text: heading,
                line: line_no,
            });
            i += 1;
            continue;
        }
        if let Some((value, next)) = unfenced_json(text, &lines, i, offset, trimmed) {
            out.push(Element::Json {
                value: Ok(value),
                line: line_no,
                lang: String::new(),
            });
            i = next;
            continue;
        }
        out.push(Element::Text {
            text: trimmed.to_owned(),
            line: line_no,
        });
        i += 1;
    }
    out
}

/// The fenced block opening at line index `i`: its element, and the index of the line after
/// its closing fence (or the end of the document).
fn fenced_block(lines: &[(usize, &str)], i: usize, fence: &str, lang: &str) -> (Element, usize) {
    let line_no = i + 1;
    let mut body = String::new();
    let mut j = i + 1;
    while j < lines.len() {
        let l = lines[j].1.trim_end_matches(['\r', '\n']);
        if is_fence_close(l, fence) {
            break;
        }
        body.push_str(l);
        body.push('\n');
        j += 1;
    }
    let lang_lower = lang.to_ascii_lowercase();
    let element = match serde_json::from_str::<Value>(&body) {
        Ok(value) if looks_like_json_lang(&lang_lower) || value.is_object() || value.is_array() => {
            Element::Json {
                value: Ok(value),
                line: line_no,
                lang: lang_lower,
            }
        }
        Err(e) if looks_like_json_lang(&lang_lower) && !lang_lower.is_empty() => Element::Json {
            value: Err(format!("{e}")),
            line: line_no,
            lang: lang_lower,
        },
        _ => Element::Code { line: line_no },
    };
    (element, j + 1)
}

/// An unfenced JSON value starting on line index `i` (at byte `offset` of `text`) that ends its
/// line (`{x} and more` is prose): the value and the index of the first line after it.
fn unfenced_json(
    text: &str,
    lines: &[(usize, &str)],
    i: usize,
    offset: usize,
    trimmed: &str,
) -> Option<(Value, usize)> {
    let start = trimmed.trim_start();
    if !(start.starts_with('{') || start.starts_with('[')) || trimmed.len() - start.len() > 3 {
        return None;
    }
    // Let serde find where the value ends.
    let rest = &text[offset..];
    let mut stream = serde_json::Deserializer::from_str(rest).into_iter::<Value>();
    let Some(Ok(value)) = stream.next() else {
        return None;
    };
    let end = offset + stream.byte_offset();
    // Skip every line the value covered.
    let mut j = i;
    while j < lines.len() && lines[j].0 < end {
        j += 1;
    }
    let tail = text[end..].split('\n').next().unwrap_or("");
    (tail.trim().is_empty() || tail.trim() == ",").then(|| (value, j.max(i + 1)))
}

fn looks_like_json_lang(lang: &str) -> bool {
    lang.is_empty()
        || lang == "json"
        || lang == "jsonc"
        || lang == "json5"
        || lang.starts_with("json ")
}

/// `(byte offset, line including its newline)` for every line.
fn line_offsets(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        out.push((offset, line));
        offset += line.len();
    }
    out
}

/// An opening fence: returns the fence string (e.g. "```") and the info string.
fn fence_open(line: &str) -> Option<(String, String)> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    if indent > 3 {
        return None;
    }
    let rest = &line[indent..];
    let ch = rest.chars().next()?;
    if ch != '`' && ch != '~' {
        return None;
    }
    let n = rest.chars().take_while(|&c| c == ch).count();
    if n < 3 {
        return None;
    }
    let info = rest[n..].trim();
    if ch == '`' && info.contains('`') {
        return None;
    }
    Some((rest[..n].to_owned(), info.to_owned()))
}

fn is_fence_close(line: &str, fence: &str) -> bool {
    let t = line.trim();
    let ch = fence.chars().next().unwrap_or('`');
    line.len() - line.trim_start_matches(' ').len() <= 3
        && t.len() >= fence.len()
        && t.chars().all(|c| c == ch)
}

/// An ATX heading: `#{1,6}` then a space (or end of line), with optional closing `#`s.
fn heading(line: &str) -> Option<(usize, String)> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    if indent > 3 {
        return None;
    }
    let rest = &line[indent..];
    let level = rest.chars().take_while(|&c| c == '#').count();
    if level == 0 || level > 6 {
        return None;
    }
    let after = &rest[level..];
    if !after.is_empty() && !after.starts_with([' ', '\t']) {
        return None;
    }
    let text = after.trim().trim_end_matches('#').trim();
    Some((level, text.to_owned()))
}

/// Lowercase words of a heading with emphasis, numbering and punctuation removed:
/// `"**3. Data Format:**"` → `"data format"`.
pub(crate) fn normalise(text: &str) -> String {
    let cleaned: String = text
        .chars()
        .map(|c| {
            if c.is_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                ' '
            }
        })
        .collect();
    let words: Vec<&str> = cleaned.split_whitespace().collect();
    // Drop a leading section number ("3", "3 1", "iv" is left alone: too ambiguous).
    let skip = words
        .iter()
        .take_while(|w| w.chars().all(|c| c.is_ascii_digit()))
        .count();
    words[skip..].join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headings_fences_and_raw_json() {
        let doc = "# Title\n\ntext\n```json\n{\"a\": 1}\n```\n## Sub ##\n{\n  \"b\": [1,\n 2]\n}\nafter\n~~~\nnot json\n~~~\n#nospace\n";
        let els = elements(doc);
        assert_eq!(
            els,
            vec![
                Element::Heading {
                    level: 1,
                    text: "Title".into(),
                    line: 1
                },
                Element::Text {
                    text: String::new(),
                    line: 2
                },
                Element::Text {
                    text: "text".into(),
                    line: 3
                },
                Element::Json {
                    value: Ok(serde_json::json!({"a": 1})),
                    line: 4,
                    lang: "json".into()
                },
                Element::Heading {
                    level: 2,
                    text: "Sub".into(),
                    line: 7
                },
                Element::Json {
                    value: Ok(serde_json::json!({"b": [1, 2]})),
                    line: 8,
                    lang: String::new()
                },
                Element::Text {
                    text: "after".into(),
                    line: 12
                },
                Element::Code { line: 13 },
                Element::Text {
                    text: "#nospace".into(),
                    line: 16
                },
            ]
        );
    }

    #[test]
    fn bad_json_fence_is_reported_and_unclosed_fence_runs_to_end() {
        let els = elements("```json\n{oops\n");
        assert!(matches!(
            &els[..],
            [Element::Json {
                value: Err(_),
                line: 1,
                ..
            }]
        ));
    }

    #[test]
    fn prose_starting_with_brace_is_text() {
        let els = elements("{\"a\":1} is an object\n");
        assert!(matches!(&els[..], [Element::Text { .. }]));
    }

    #[test]
    fn normalises_headings() {
        assert_eq!(normalise("**3. Data Format:**"), "data format");
        assert_eq!(normalise("Test Case 2"), "test case 2");
        assert_eq!(normalise("ERROR-HANDLING"), "error handling");
    }
}
