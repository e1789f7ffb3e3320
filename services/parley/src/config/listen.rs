//! A listen address as people write it: `host:port`, where the host is an IP address (IPv6 in
//! brackets) or a name such as `localhost`, resolved when the server starts.

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;

use serde::Deserialize;

use super::{ConfigError, invalid};

/// `host:port` to listen on; see [`ListenAddr::resolve`].
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub struct ListenAddr {
    /// An IP address (IPv6 without brackets) or a host name.
    host: String,
    port: u16,
}

/// Why a text is not `host:port`.
#[derive(Debug, thiserror::Error)]
#[error("{0:?} is not HOST:PORT (e.g. 127.0.0.1:8080, [::1]:8080, localhost:8080)")]
pub struct BadListenAddr(String);

impl ListenAddr {
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The addresses to try, in the resolver's order; a name that resolves to none is the
    /// invalid setting `setting`. A literal IP address resolves to itself without a lookup.
    pub async fn resolve(&self, setting: &'static str) -> Result<Vec<SocketAddr>, ConfigError> {
        let cannot = |why: String| invalid(setting, format!("cannot resolve {self}: {why}"));
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host((self.host.as_str(), self.port))
            .await
            .map_err(|e| cannot(e.to_string()))?
            .collect();
        if addrs.is_empty() {
            return Err(cannot("the name has no addresses".into()));
        }
        Ok(addrs)
    }
}

impl From<SocketAddr> for ListenAddr {
    fn from(addr: SocketAddr) -> Self {
        ListenAddr {
            host: addr.ip().to_string(),
            port: addr.port(),
        }
    }
}

impl FromStr for ListenAddr {
    type Err = BadListenAddr;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if let Ok(addr) = text.parse::<SocketAddr>() {
            return Ok(addr.into());
        }
        let bad = || BadListenAddr(text.to_owned());
        let (host, port) = text.rsplit_once(':').ok_or_else(bad)?;
        let port = port.parse().map_err(|_| bad())?;
        let name_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_');
        if host.is_empty() || !host.chars().all(name_char) {
            return Err(bad());
        }
        Ok(ListenAddr {
            host: host.to_owned(),
            port,
        })
    }
}

impl TryFrom<String> for ListenAddr {
    type Error = BadListenAddr;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        text.parse()
    }
}

impl fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_and_names_parse_and_print_back() {
        for text in [
            "127.0.0.1:8080",
            "[::1]:0",
            "localhost:8080",
            "parley-provider:8081",
        ] {
            let addr: ListenAddr = text.parse().expect(text);
            assert_eq!(addr.to_string(), text);
        }
        for bad in [
            "localhost",
            "localhost:http",
            ":8080",
            "a b:80",
            "host:99999",
            "[::1:80",
        ] {
            assert!(bad.parse::<ListenAddr>().is_err(), "{bad}");
        }
    }

    #[test]
    fn the_config_file_takes_host_names() {
        let settings: crate::config::Settings =
            toml::from_str("listen = \"localhost:9000\"\nupload_listen = \"[::1]:9001\"\n")
                .expect("valid");
        assert_eq!(settings.listen.to_string(), "localhost:9000");
        assert_eq!(settings.upload_listen.port(), 9001);
        let err = toml::from_str::<crate::config::Settings>("listen = \"localhost\"\n")
            .expect_err("no port");
        assert!(err.to_string().contains("HOST:PORT"), "{err}");
    }

    #[tokio::test]
    async fn localhost_resolves_to_loopback_and_a_bad_name_names_the_setting() {
        let addr: ListenAddr = "localhost:0".parse().expect("valid");
        let resolved = addr.resolve("listen").await.expect("localhost resolves");
        assert!(
            resolved.iter().all(|a| a.ip().is_loopback()),
            "{resolved:?}"
        );
        let addr: ListenAddr = "no-such-host.invalid:80".parse().expect("valid");
        let err = addr
            .resolve("upload_listen")
            .await
            .expect_err("no such host");
        let text = err.to_string();
        assert!(
            text.contains("upload_listen") && text.contains("no-such-host.invalid:80"),
            "{text}"
        );
    }
}
