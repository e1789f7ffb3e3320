//! A handler's compiled form: the built-in reasoner's mapping, the plan its JavaScript was
//! generated from, served by the sandbox's mapping runtime with no JavaScript engine in the call
//! (`sandbox/src/fast/mapping.rs`). It buys a 0-RTT call about a third of its cost against a
//! provider in its own process: the product protocol's `Provider::application` 19 µs median
//! against 47 µs through the JavaScript; over the wire 1.62× (HTTP) and 1.78–1.83× (WebSocket)
//! of a plain text message, where the JavaScript gave 1.81–1.88× and 2.21–2.48×
//! (the negotiation bench, `tests/benches/`). Switching it off: `[negotiation] compiled_handlers = false`
//! serves every handler as its JavaScript, and attaches no compiled form.
//!
//! A compiled form serves only after it answered every test case of its protocol exactly as the
//! verified JavaScript did (here, with `parley_anp::verify::compiled_differs`); it is kept with the
//! handler in the store (`handlers.compiled`, migration 0010, `Store::attach_compiled`), and a
//! stored form that no longer publishes falls back to the JavaScript
//! (`runner::publish_serving`). The reasoner hands it over as `GeneratedHandler::compiled`; the
//! crate `parley-mapping` is the one implementation of a mapping's answers, shared with the
//! mapping runtime guest.

use parley_anp::{ProtocolDoc, TestCase, VerificationReport, verify::compiled_differs};
use parley_reasoner::GeneratedHandler;
use parley_sandbox::Dialect;
use serde_json::Value;
use uuid::Uuid;

use super::Provider;
use crate::error::ApiError;

impl Provider {
    /// Checks a verified handler's compiled form, when it has one: the same test cases run
    /// through it in the sandbox's mapping runtime, and it must answer every one exactly as the
    /// JavaScript did (`reference`). Then it is attached to the candidate and returned, to serve
    /// in place of the JavaScript; otherwise the JavaScript serves alone, and a warning says why.
    pub(super) async fn check_compiled(
        &self,
        doc: &ProtocolDoc,
        generated: &GeneratedHandler,
        reference: &VerificationReport,
        candidate: Uuid,
    ) -> Result<Option<Value>, ApiError> {
        self.check_compiled_with(doc, doc.test_cases(), generated, reference, candidate)
            .await
    }

    /// [`Provider::check_compiled`] over `cases`, the ones `reference` ran (for a protocol
    /// without test cases of its own, see `cases`).
    pub(super) async fn check_compiled_with(
        &self,
        doc: &ProtocolDoc,
        cases: &[TestCase],
        generated: &GeneratedHandler,
        reference: &VerificationReport,
        candidate: Uuid,
    ) -> Result<Option<Value>, ApiError> {
        let Some(compiled) = generated
            .compiled
            .as_ref()
            .filter(|_| self.limits.compiled_handlers)
        else {
            return Ok(None);
        };
        let difference = match self
            .runner
            .verify(
                doc,
                cases,
                Dialect::Mapping,
                &compiled.to_string(),
                &generated.grants,
            )
            .await
        {
            Ok(report) => compiled_differs(reference, &report),
            Err(e) => Some(format!("it does not load: {}: {e}", e.code())),
        };
        if let Some(difference) = difference {
            tracing::warn!(
                %difference,
                "provider: the handler's compiled form does not answer as its JavaScript does; \
                 the JavaScript serves"
            );
            return Ok(None);
        }
        self.store.attach_compiled(candidate, compiled).await?;
        Ok(Some(compiled.clone()))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use parley_anp::ProtocolHash;
    use parley_reasoner::DeclaredCapability;
    use parley_sandbox::Sandbox;
    use parley_store::Store;

    use parley_store::NewHandler;
    use serde_json::json;

    use super::*;

    /// A verified candidate of `generated` for protocol `hash`.
    async fn verified_candidate(
        store: &Arc<dyn Store>,
        hash: &ProtocolHash,
        generated: &GeneratedHandler,
    ) -> Uuid {
        let candidate = store
            .insert_handler_candidate(NewHandler {
                protocol_hash: hash.to_string(),
                source: generated.source.clone(),
                backend: "builtin".into(),
                capabilities: generated.grants.clone(),
            })
            .await
            .expect("candidate");
        store
            .record_handler_verification(candidate.id, true, &json!({"passed": true}))
            .await
            .expect("verified");
        candidate.id
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_compiled_form_is_attached_only_when_it_answers_as_the_javascript() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let text = std::fs::read_to_string(root.join("examples/protocols/product-info.md"))
            .expect("the example protocol");
        let doc = ProtocolDoc::parse(text.clone()).expect("a protocol document");
        let dir = tempfile::tempdir().expect("tempdir");
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("p.db").display());
        let store = parley_store::connect(&url, Default::default())
            .await
            .expect("store");
        store.put_protocol(&text).await.expect("protocol");
        let capabilities =
            crate::startup::load_capabilities(Some(&root.join("examples/capabilities.toml")))
                .await
                .expect("capabilities");
        let sandbox =
            Arc::new(Sandbox::new(parley_sandbox::SandboxConfig::default()).expect("a sandbox"));
        let provider = |compiled_handlers| {
            Provider::new(
                store.clone(),
                capabilities.clone(),
                Arc::new(parley_reasoner::BuiltinProtocolReasoner),
                Arc::new(parley_reasoner::BuiltinReasoner::new(capabilities.clone())),
                sandbox.clone(),
                crate::config::NegotiationLimits {
                    compiled_handlers,
                    ..crate::config::NegotiationLimits::default()
                },
                crate::negotiation::provider::Oversight {
                    access: Arc::new(crate::access::Access::new(
                        parley_auth::Grants::all(),
                        store.clone(),
                    )),
                    audit: crate::audit::Audit::new(store.clone(), &Default::default()),
                },
            )
        };
        let generated = parley_reasoner::BuiltinProtocolReasoner
            .generate_sync(&doc, &DeclaredCapability::all(&capabilities), None)
            .expect("the built-in handler");
        let mapping = generated.compiled.clone().expect("a compiled form");
        let on = provider(true);
        let reference = on
            .runner
            .verify(
                &doc,
                doc.test_cases(),
                Dialect::JavaScript,
                &generated.source,
                &generated.grants,
            )
            .await
            .expect("the JavaScript publishes");
        // Verification leaves nothing published behind.
        assert_eq!(on.runner.verifying(), 0);
        assert!(
            reference.passed() && reference.cases.len() >= 2,
            "{reference:?}"
        );
        let compiled_of = |id| {
            let store = store.clone();
            async move {
                store
                    .get_handler(id)
                    .await
                    .expect("get")
                    .expect("stored")
                    .compiled
            }
        };

        // The mapping the JavaScript was generated from answers as it does: attached.
        let id = verified_candidate(&store, &doc.hash(), &generated).await;
        let attached = on
            .check_compiled(&doc, &generated, &reference, id)
            .await
            .expect("checked");
        assert_eq!(attached.as_ref(), Some(&mapping));
        assert_eq!(compiled_of(id).await.as_ref(), Some(&mapping));

        // A mapping that answers differently (another success code), or is no mapping at all,
        // is not: the JavaScript serves.
        let mut other_code = mapping.clone();
        other_code["codes"]["ok"] = json!(201);
        let mut not_a_mapping = mapping.clone();
        not_a_mapping["capability"] = json!(5);
        for compiled in [other_code, not_a_mapping] {
            let tampered = GeneratedHandler {
                compiled: Some(compiled),
                ..generated.clone()
            };
            let id = verified_candidate(&store, &doc.hash(), &tampered).await;
            let attached = on
                .check_compiled(&doc, &tampered, &reference, id)
                .await
                .expect("checked");
            assert_eq!(attached, None);
            assert_eq!(compiled_of(id).await, None);
        }

        // An operator who turned compiled forms off gets the JavaScript, whatever the mapping.
        let off = provider(false);
        let id = verified_candidate(&store, &doc.hash(), &generated).await;
        assert_eq!(
            off.check_compiled(&doc, &generated, &reference, id)
                .await
                .expect("checked"),
            None
        );
        assert_eq!(compiled_of(id).await, None);

        // Serving from the store: the compiled form when the active handler has one (unless
        // turned off); a stored form that does not publish falls back to the JavaScript.
        let request = json!({
            "messageId": "c1", "type": "REQUEST", "action": "getProductInfo", "productId": "P12345"
        });
        let hash = doc.hash();
        let serve = |compiled_handlers| {
            let provider = provider(compiled_handlers);
            let request = request.clone();
            async move {
                let (active, _) = provider
                    .cache
                    .get(&hash, &provider.store, &provider.sandbox, compiled_handlers)
                    .await
                    .expect("the active protocol loads");
                let answer = provider
                    .application(&hash, &request, "peer", tokio::runtime::Handle::current())
                    .await
                    .expect("an answer");
                (active.handler.dialect(), answer)
            }
        };
        let attached = verified_candidate(&store, &hash, &generated).await;
        store
            .attach_compiled(attached, &mapping)
            .await
            .expect("attach");
        store.activate_handler(attached).await.expect("activate");
        let (dialect, compiled_answer) = serve(true).await;
        assert_eq!(dialect, Dialect::Mapping);
        assert_eq!(compiled_answer["status"]["code"], 200, "{compiled_answer}");
        let (dialect, javascript_answer) = serve(false).await;
        assert_eq!(dialect, Dialect::JavaScript);
        assert_eq!(javascript_answer, compiled_answer);

        let broken = verified_candidate(&store, &hash, &generated).await;
        store
            .attach_compiled(broken, &json!({ "capability": 5 }))
            .await
            .expect("the store takes any object");
        store.activate_handler(broken).await.expect("activate");
        let (dialect, fallback_answer) = serve(true).await;
        assert_eq!(dialect, Dialect::JavaScript);
        assert_eq!(fallback_answer, compiled_answer);
    }
}
