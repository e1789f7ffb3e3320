//! The capabilities on offer right now: those the file declares, and those MCP servers' tools
//! become, which change when a server lists different tools.
//!
//! Readers take a snapshot (an `Arc` of the whole map, behind a read lock held for a pointer
//! copy), so a call never waits for a tool list being rebuilt and sees one consistent set.
//! Names: a declared capability always keeps its name; between servers, the one declared first
//! in the file keeps it; the tool that loses is left out with a warning.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use crate::Capability;

pub(crate) type Snapshot = Arc<BTreeMap<String, Arc<Capability>>>;

/// What one server's tools became.
#[derive(Debug)]
struct Discovered {
    server: String,
    capabilities: Vec<Arc<Capability>>,
}

#[derive(Debug)]
pub(crate) struct Catalogue {
    declared: BTreeMap<String, Arc<Capability>>,
    /// Per server, by its place in the file.
    discovered: Mutex<BTreeMap<usize, Discovered>>,
    current: RwLock<Snapshot>,
    generation: AtomicU64,
}

impl Catalogue {
    pub(crate) fn new(declared: BTreeMap<String, Arc<Capability>>) -> Self {
        let current = RwLock::new(Arc::new(declared.clone()));
        Catalogue {
            declared,
            discovered: Mutex::new(BTreeMap::new()),
            current,
            generation: AtomicU64::new(0),
        }
    }

    pub(crate) fn snapshot(&self) -> Snapshot {
        Arc::clone(&self.current.read().unwrap_or_else(|e| e.into_inner()))
    }

    pub(crate) fn get(&self, name: &str) -> Option<Arc<Capability>> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    }

    /// Counts the changes of the set: a reader that caches something derived from it compares.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Replaces what one server's tools become, and rebuilds the set.
    pub(crate) fn set_discovered(
        &self,
        server: usize,
        server_name: &str,
        capabilities: Vec<Arc<Capability>>,
    ) {
        let mut discovered = self.discovered.lock().unwrap_or_else(|e| e.into_inner());
        discovered.insert(
            server,
            Discovered {
                server: server_name.to_owned(),
                capabilities,
            },
        );
        let mut set = self.declared.clone();
        for found in discovered.values() {
            for capability in &found.capabilities {
                if set.contains_key(capability.name()) {
                    tracing::warn!(
                        server = %found.server,
                        capability = capability.name(),
                        "an MCP tool is left out: a capability of that name exists already"
                    );
                    continue;
                }
                set.insert(capability.name().to_owned(), Arc::clone(capability));
            }
        }
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(set);
        self.generation.fetch_add(1, Ordering::AcqRel);
    }
}
