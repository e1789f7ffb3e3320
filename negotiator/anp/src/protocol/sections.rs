//! The sections of a protocol document: which headings name which section, and the elements
//! and raw markdown under each (see the parent module's table).

use std::collections::BTreeMap;

use crate::markdown::{Element, normalise};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Section {
    Requirements,
    Process,
    DataFormat,
    ErrorHandling,
    TestCases,
}

impl Section {
    pub(super) fn title(self) -> &'static str {
        match self {
            Section::Requirements => "Requirements",
            Section::Process => "Process",
            Section::DataFormat => "Data Format",
            Section::ErrorHandling => "Error Handling",
            Section::TestCases => "Test Cases",
        }
    }

    fn classify(heading: &str) -> Option<Section> {
        let h = normalise(heading);
        let h = h.as_str();
        match h {
            "requirements" | "requirement" | "purpose" | "goal" | "goals" => {
                Some(Section::Requirements)
            }
            "process"
            | "process description"
            | "interaction flow"
            | "flow"
            | "interaction"
            | "process flow"
            | "protocol flow"
            | "message flow"
            | "interaction process" => Some(Section::Process),
            "data format"
            | "data format description"
            | "data formats"
            | "message format"
            | "message formats"
            | "data format definition"
            | "request message format"
            | "response message format"
            | "request format"
            | "response format"
            | "data structures"
            | "message structure"
            | "message structures"
            | "message definitions"
            | "message examples"
            | "example messages"
            | "examples"
            | "request and response format"
            | "request and response formats"
            | "data format specification"
            | "message format specification" => Some(Section::DataFormat),
            "error handling" | "errors" | "error codes" | "error handling description" => {
                Some(Section::ErrorHandling)
            }
            "test cases"
            | "tests"
            | "test case"
            | "test cases description"
            | "test scenarios"
            | "testing"
            | "example test cases"
            | "acceptance tests"
            | "test plan" => Some(Section::TestCases),
            _ => None,
        }
    }
}

/// The elements of one section plus its raw markdown.
#[derive(Default)]
pub(super) struct SectionBody<'a> {
    pub(super) elements: Vec<&'a Element>,
    pub(super) text: String,
}

/// Splits the elements into recognised sections. A second heading with the same section name
/// continues that section.
pub(super) fn split_sections<'a>(
    els: &'a [Element],
    lines: &[&str],
) -> BTreeMap<Section, SectionBody<'a>> {
    let mut out: BTreeMap<Section, SectionBody<'a>> = BTreeMap::new();
    let mut section_level: Option<usize> = None;
    let mut current: Option<Section> = None;
    // Line spans of each section's body: (section, first line, line after the last), 1-based.
    let mut spans: Vec<(Section, usize, Option<usize>)> = Vec::new();
    let close = |spans: &mut Vec<(Section, usize, Option<usize>)>, line: usize| {
        if let Some(last) = spans.last_mut()
            && last.2.is_none()
        {
            last.2 = Some(line);
        }
    };
    for el in els {
        if let Element::Heading { level, text, line } = el {
            match (Section::classify(text), section_level) {
                (Some(kind), level_set) if level_set.is_none_or(|l| *level <= l) => {
                    section_level.get_or_insert(*level);
                    close(&mut spans, *line);
                    current = Some(kind);
                    spans.push((kind, line + 1, None));
                    continue;
                }
                // A non-section heading at or above the section level ends the section (e.g. a
                // closing `# Appendix`), except a numbered test case heading, which seed 002
                // itself writes at the top level.
                (None, Some(l)) if *level <= l && !normalise(text).starts_with("test case") => {
                    close(&mut spans, *line);
                    current = None;
                    continue;
                }
                _ => {}
            }
        }
        if let Some(section) = current {
            out.entry(section).or_default().elements.push(el);
        }
    }
    for (section, start, end) in spans {
        let end = end.unwrap_or(lines.len() + 1).min(lines.len() + 1);
        let text = lines
            .get(start - 1..end - 1)
            .map(|l| l.join("\n"))
            .unwrap_or_default();
        let body = out.entry(section).or_default();
        if !body.text.is_empty() {
            body.text.push('\n');
        }
        body.text.push_str(text.trim_matches('\n'));
    }
    out
}
