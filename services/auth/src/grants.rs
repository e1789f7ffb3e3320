//! What a peer may do. One [`Grants`] value per peer (an API key's peer, a JWT's subject, a
//! client certificate's name), and one for anonymous peers, the operator's choice
//! (`[access.anonymous]`, talk only by default). Checked on every message and every capability
//! call, whoever proposed the call (the peer, its protocol's handler, or the reasoner): an agreed
//! protocol is not an authorization.

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// What a peer may do.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grants {
    /// May it negotiate protocols with this agent (the meta-protocol, any framing).
    #[serde(default)]
    pub negotiate: bool,
    /// May it talk to the natural-language reasoner (which may cost model tokens).
    #[serde(default)]
    pub talk: bool,
    /// The capabilities it may have called on its behalf: by a tool call, by the handler of a
    /// protocol it calls, or by the reasoner answering it.
    #[serde(default)]
    pub capabilities: Scope,
    /// The active protocols it may call besides those it agreed itself, by hash (64 hex).
    #[serde(default)]
    pub protocols: Scope,
}

/// A set of names, or every name (`"*"` in a file).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Scope {
    #[default]
    Nothing,
    Only(BTreeSet<String>),
    All,
}

/// One thing a peer asks to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action<'a> {
    Negotiate,
    Talk,
    Capability(&'a str),
    /// A call of an active protocol by its hash; `own` when the peer agreed it itself.
    Protocol {
        hash: &'a str,
        own: bool,
    },
}

impl Grants {
    /// Every grant: what a peer of an agent without access control may do.
    pub fn all() -> Grants {
        Grants {
            negotiate: true,
            talk: true,
            capabilities: Scope::All,
            protocols: Scope::All,
        }
    }

    /// Talking to the reasoner, nothing else: the default for anonymous peers.
    pub fn talk_only() -> Grants {
        Grants {
            talk: true,
            ..Grants::default()
        }
    }

    pub fn allows(&self, action: Action<'_>) -> bool {
        match action {
            Action::Negotiate => self.negotiate,
            Action::Talk => self.talk,
            Action::Capability(name) => self.capabilities.contains(name),
            Action::Protocol { own: true, .. } => true,
            Action::Protocol { hash, own: false } => self.protocols.contains(hash),
        }
    }
}

impl Scope {
    pub fn contains(&self, name: &str) -> bool {
        match self {
            Scope::Nothing => false,
            Scope::All => true,
            Scope::Only(names) => names.contains(name),
        }
    }

    /// A scope of exactly these names (`"*"` among them: every name).
    pub fn of<I, S>(names: I) -> Scope
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let names: BTreeSet<String> = names.into_iter().map(Into::into).collect();
        if names.contains("*") {
            Scope::All
        } else if names.is_empty() {
            Scope::Nothing
        } else {
            Scope::Only(names)
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scope::Nothing => f.write_str("-"),
            Scope::All => f.write_str("*"),
            Scope::Only(names) => {
                let names: Vec<&str> = names.iter().map(String::as_str).collect();
                f.write_str(&names.join(","))
            }
        }
    }
}

/// `"*"`, or a list of names (which may hold `"*"`).
impl Serialize for Scope {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Scope::All => s.serialize_str("*"),
            Scope::Nothing => s.collect_seq(std::iter::empty::<&str>()),
            Scope::Only(names) => s.collect_seq(names),
        }
    }
}

impl<'de> Deserialize<'de> for Scope {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Scope, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Repr {
            One(String),
            Many(Vec<String>),
        }
        match Repr::deserialize(d)? {
            Repr::One(s) if s == "*" => Ok(Scope::All),
            Repr::One(s) => Err(serde::de::Error::custom(format!(
                "expected \"*\" or a list of names, found \"{s}\""
            ))),
            Repr::Many(names) => Ok(Scope::of(names)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn talk_only_talks_and_nothing_else() {
        let g = Grants::talk_only();
        assert!(g.allows(Action::Talk));
        assert!(!g.allows(Action::Negotiate));
        assert!(!g.allows(Action::Capability("weather")));
        assert!(!g.allows(Action::Protocol {
            hash: "ab",
            own: false
        }));
    }

    #[test]
    fn a_peer_calls_its_own_protocols_and_the_ones_granted() {
        let g = Grants {
            protocols: Scope::of(["ab"]),
            ..Grants::default()
        };
        assert!(g.allows(Action::Protocol {
            hash: "cd",
            own: true
        }));
        assert!(g.allows(Action::Protocol {
            hash: "ab",
            own: false
        }));
        assert!(!g.allows(Action::Protocol {
            hash: "cd",
            own: false
        }));
    }

    #[test]
    fn scopes_read_and_write_as_star_or_a_list() {
        let g: Grants =
            serde_json::from_str(r#"{"negotiate":true,"capabilities":["weather","stock"]}"#)
                .expect("grants");
        assert!(g.allows(Action::Capability("stock")));
        assert!(!g.allows(Action::Capability("orders")));
        assert_eq!(g.protocols, Scope::Nothing);
        let all: Grants =
            serde_json::from_str(r#"{"capabilities":"*","protocols":["*"]}"#).expect("grants");
        assert_eq!(all.capabilities, Scope::All);
        assert_eq!(all.protocols, Scope::All);
        let back: Grants =
            serde_json::from_value(serde_json::to_value(&g).expect("json")).expect("grants");
        assert_eq!(back, g);
        assert!(serde_json::from_str::<Grants>(r#"{"capabilities":"weather"}"#).is_err());
        assert!(serde_json::from_str::<Grants>(r#"{"negotiate":true,"admin":true}"#).is_err());
    }
}
