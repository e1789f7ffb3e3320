//! Field names across case styles: the words of a name, its style-insensitive key, how request
//! fields match capability inputs, and rewriting a name in a document's style.

/// Lowercase words of an identifier in any case style: `productID` → `["product", "id"]`.
pub fn words(name: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let chars: Vec<char> = name.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        if !c.is_alphanumeric() {
            if !current.is_empty() {
                out.push(std::mem::take(&mut current));
            }
            continue;
        }
        let prev = i.checked_sub(1).and_then(|p| chars.get(p)).copied();
        let next = chars.get(i + 1).copied();
        let boundary = match prev {
            Some(p) if c.is_uppercase() => {
                p.is_lowercase()
                    || p.is_ascii_digit()
                    || (p.is_uppercase() && next.is_some_and(char::is_lowercase))
            }
            Some(p) if c.is_ascii_digit() => p.is_alphabetic(),
            _ => false,
        };
        if boundary && !current.is_empty() {
            out.push(std::mem::take(&mut current));
        }
        current.extend(c.to_lowercase());
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// The case-insensitive, style-insensitive key of a name.
pub fn key(name: &str) -> String {
    words(name).concat()
}

/// Whether request field `request` feeds capability input `input` (see the module docs).
pub(super) fn names_match(request: &str, input: &str, entity: &[String]) -> bool {
    let (r, i) = (key(request), key(input));
    r == i || (!entity.is_empty() && format!("{}{r}", entity.concat()) == i)
}

/// The capability's object noun: its name without a leading verb and a generic trailing word.
pub(crate) fn entity_words(capability: &str) -> Vec<String> {
    const VERBS: [&str; 10] = [
        "get", "find", "lookup", "look", "fetch", "search", "list", "read", "query", "retrieve",
    ];
    const GENERIC: [&str; 8] = [
        "info",
        "information",
        "details",
        "detail",
        "status",
        "data",
        "record",
        "by",
    ];
    let mut w = words(capability);
    while w
        .first()
        .is_some_and(|f| VERBS.contains(&f.as_str()) || f == "up")
    {
        w.remove(0);
    }
    if let Some(pos) = w.iter().position(|x| x == "by") {
        w.truncate(pos);
    }
    while w.len() > 1 && w.last().is_some_and(|l| GENERIC.contains(&l.as_str())) {
        w.pop();
    }
    w
}

/// Naming style of a set of field names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaseStyle {
    Camel,
    Pascal,
    Snake,
    Kebab,
}

impl CaseStyle {
    /// The style most of `names` use (camelCase when undecided).
    pub fn detect<'a>(names: impl IntoIterator<Item = &'a str>) -> Self {
        let mut counts = [0usize; 4];
        for n in names {
            let style = if n.contains('_') {
                CaseStyle::Snake
            } else if n.contains('-') {
                CaseStyle::Kebab
            } else if n.chars().next().is_some_and(char::is_uppercase) {
                CaseStyle::Pascal
            } else if n.chars().any(char::is_uppercase) {
                CaseStyle::Camel
            } else {
                continue; // one lowercase word says nothing
            };
            counts[style as usize] += 1;
        }
        let styles = [
            CaseStyle::Camel,
            CaseStyle::Pascal,
            CaseStyle::Snake,
            CaseStyle::Kebab,
        ];
        let mut best = CaseStyle::Camel;
        for s in styles {
            if counts[s as usize] > counts[best as usize] {
                best = s;
            }
        }
        best
    }

    /// `name` rewritten in this style.
    pub fn apply(self, name: &str) -> String {
        let w = words(name);
        let cap = |s: &str| {
            let mut c = s.chars();
            c.next()
                .map(|f| f.to_uppercase().collect::<String>() + c.as_str())
                .unwrap_or_default()
        };
        match self {
            CaseStyle::Snake => w.join("_"),
            CaseStyle::Kebab => w.join("-"),
            CaseStyle::Pascal => w.iter().map(|x| cap(x)).collect(),
            CaseStyle::Camel => w
                .iter()
                .enumerate()
                .map(|(i, x)| if i == 0 { x.clone() } else { cap(x) })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_across_styles() {
        for name in [
            "productId",
            "product_id",
            "product-id",
            "ProductId",
            "PRODUCT_ID",
            "productID",
        ] {
            assert_eq!(words(name), ["product", "id"], "{name}");
        }
        assert_eq!(words("HTTPStatusCode"), ["http", "status", "code"]);
        assert_eq!(words("sku2Name"), ["sku", "2", "name"]);
    }

    #[test]
    fn styles_apply() {
        assert_eq!(CaseStyle::Snake.apply("productId"), "product_id");
        assert_eq!(CaseStyle::Kebab.apply("productId"), "product-id");
        assert_eq!(CaseStyle::Pascal.apply("product_id"), "ProductId");
        assert_eq!(CaseStyle::Camel.apply("product-id"), "productId");
        assert_eq!(
            CaseStyle::detect(["message_id", "product_id", "type"]),
            CaseStyle::Snake
        );
    }

    #[test]
    fn entity_from_capability_name() {
        assert_eq!(entity_words("getProductInfo"), ["product"]);
        assert_eq!(entity_words("getOrderStatus"), ["order"]);
        assert_eq!(entity_words("lookup_user_by_email"), ["user"]);
        assert!(names_match(
            "id",
            "productId",
            &entity_words("getProductInfo")
        ));
    }
}
