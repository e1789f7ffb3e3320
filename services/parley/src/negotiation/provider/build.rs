//! Building the handler of an agreed protocol: generation by the protocol reasoner,
//! verification against the protocol's test cases in the sandbox, bounded regeneration from the
//! failure. A verified handler's compiled form is checked in `compiled.rs`.

use parley_anp::{ProtocolDoc, TestCase, Verdict, VerificationReport};
use parley_reasoner::GeneratedHandler;
use parley_sandbox::Dialect;
use parley_store::{HandlerRecord, NewHandler};
use serde_json::json;
use uuid::Uuid;

use super::cases::{Cases, Origin};
use super::state::{Disputed, Negotiation};
use super::{Provider, reasoner_error};
use crate::error::ApiError;
use crate::metrics;

/// The result of building a handler for an agreed protocol.
#[derive(Debug)]
pub(super) enum Built {
    /// Generated and verified.
    Verified,
    /// Generation or verification failed on our side.
    Failed(String),
    /// The handler's answers follow the protocol's schema but differ from the peer's test
    /// expectations even after fixing: the expectation itself may be wrong, so the peer is
    /// asked through `fixErrorNegotiation`.
    PeerExpectation(String),
}

impl Built {
    pub(super) fn into_result(self) -> Result<(), String> {
        match self {
            Built::Verified => Ok(()),
            Built::Failed(why) | Built::PeerExpectation(why) => Err(why),
        }
    }
}

/// Where a new handler comes from: generated for the protocol (from the mapping the reasoner
/// accepted it with, when it has one), or fixed from an earlier handler and its failure.
pub(super) enum Source {
    Generate(Option<parley_reasoner::Mapping>),
    Fix(GeneratedHandler, String),
}

impl Provider {
    /// Generates a handler for `text`, verifies it in the sandbox against the protocol's test
    /// cases, and regenerates it from the failure a bounded number of times. A verified handler
    /// becomes `negotiation`'s candidate. `Ok(Built::Failed)` is a generation or verification
    /// failure to report to the peer; `Err` a failure of our own infrastructure.
    pub(super) async fn build_handler(
        &self,
        text: &str,
        source: Source,
        negotiation: &mut Negotiation,
    ) -> Result<Built, ApiError> {
        let doc = match ProtocolDoc::parse(text) {
            Ok(doc) => doc,
            Err(e) => {
                return Ok(Built::Failed(format!(
                    "the agreed text is not a protocol document: {e}"
                )));
            }
        };
        let Some(cases) = self.cases_for(&doc, negotiation) else {
            return Ok(Built::Failed(
                "the protocol has no test cases, and none could be written for it from this provider's capabilities; Parley only activates verified handlers".into(),
            ));
        };
        let reasoner = self.protocol_reasoner(&negotiation.meter);
        let generated = match source {
            Source::Generate(mapping) => {
                metrics::reasoner_call(self.reasoner.backend(), "generate");
                reasoner
                    .generate_handler(&doc, &self.specs, mapping.as_ref())
                    .await
            }
            Source::Fix(previous, failure) => {
                metrics::reasoner_call(self.reasoner.backend(), "fix");
                reasoner
                    .fix_handler(&doc, &self.specs, &previous, &failure)
                    .await
            }
        };
        match generated {
            Ok(generated) => {
                self.verify_and_fix(&doc, &cases, generated, negotiation)
                    .await
            }
            Err(e) if e.is_backend_failure() => Err(reasoner_error(e)),
            Err(e) => Ok(Built::Failed(e.to_string())),
        }
    }

    /// Verifies `generated` against `cases`, and while it fails (at most `fix_attempts` times)
    /// asks the reasoner for a fix and verifies that.
    async fn verify_and_fix(
        &self,
        doc: &ProtocolDoc,
        cases: &Cases,
        mut generated: GeneratedHandler,
        negotiation: &mut Negotiation,
    ) -> Result<Built, ApiError> {
        let mut attempt = 0;
        loop {
            // The peer's protocols call capabilities on its behalf: a handler that needs one it
            // may not use is not built (the reason says which it may use).
            if let Err(why) = crate::access::current_may_use(&generated.grants) {
                return Ok(Built::Failed(format!(
                    "the handler for this protocol needs a capability that is not yours: {why}"
                )));
            }
            let (candidate, report, kept) =
                match self.verify_candidate(doc, cases, &generated).await? {
                    Ok(verified) => verified,
                    Err(failure) => return Ok(Built::Failed(failure)),
                };
            if report.passed() {
                generated.compiled = self
                    .check_compiled_with(doc, &kept.list, &generated, &report, candidate)
                    .await?;
                negotiation.generated_cases = kept.to_propose();
                negotiation.handler_id = Some(candidate);
                negotiation.handler = Some(generated);
                return Ok(Built::Verified);
            }
            let failure = report.failure_description();
            attempt += 1;
            if attempt > self.limits.fix_attempts {
                return Ok(give_up(negotiation, cases, generated, report, failure));
            }
            metrics::reasoner_call(self.reasoner.backend(), "fix");
            generated = match self
                .protocol_reasoner(&negotiation.meter)
                .fix_handler(doc, &self.specs, &generated, &failure)
                .await
            {
                Ok(g) => g,
                Err(e) if e.is_backend_failure() => return Err(reasoner_error(e)),
                // The backend has nothing better: the failure stands.
                Err(_) => return Ok(give_up(negotiation, cases, generated, report, failure)),
            };
        }
    }

    /// Stores `generated` as a candidate handler of `doc`'s protocol.
    async fn insert_candidate(
        &self,
        doc: &ProtocolDoc,
        generated: &GeneratedHandler,
    ) -> Result<HandlerRecord, ApiError> {
        Ok(self
            .store
            .insert_handler_candidate(NewHandler {
                protocol_hash: doc.hash().to_string(),
                source: generated.source.clone(),
                backend: self.reasoner.backend().to_owned(),
                capabilities: generated.grants.clone(),
            })
            .await?)
    }

    /// Stores `generated` as a handler candidate, runs `cases` through it and records the
    /// verification, with the cases it kept (see `cases`). `Ok(Err(why))`: the handler does not
    /// load.
    async fn verify_candidate(
        &self,
        doc: &ProtocolDoc,
        cases: &Cases,
        generated: &GeneratedHandler,
    ) -> Result<Result<(Uuid, VerificationReport, Cases), String>, ApiError> {
        let candidate = self.insert_candidate(doc, generated).await?;
        let verified = self
            .runner
            .verify(
                doc,
                &cases.list,
                Dialect::JavaScript,
                &generated.source,
                &generated.grants,
            )
            .await;
        let (passed, record, outcome) = match verified {
            Ok(report) => {
                let (kept, report) = cases.kept(report);
                let record = kept.record(&report);
                (report.passed(), record, Ok((candidate.id, report, kept)))
            }
            Err(e) => {
                let failure = format!("the handler does not load: {}: {e}", e.code());
                (false, json!({ "error": failure }), Err(failure))
            }
        };
        self.store
            .record_handler_verification(candidate.id, passed, &record)
            .await?;
        Ok(outcome)
    }

    /// The peer accepted the disputed handler's answers in place of its test expectations: that
    /// handler becomes the verified candidate, its record holding the verification and the
    /// report the peer accepted. `Ok(Err(why))` when there is nothing to accept.
    pub(super) async fn accept_disputed(
        &self,
        negotiation: &mut Negotiation,
    ) -> Result<Result<(), String>, ApiError> {
        let Some(Disputed {
            handler: mut generated,
            report,
        }) = negotiation.disputed.take()
        else {
            return Ok(Err("no handler was disputed".into()));
        };
        let Some(doc) = negotiation
            .session
            .agreed()
            .and_then(|(_, text)| ProtocolDoc::parse(text).ok())
        else {
            return Ok(Err("no protocol is agreed".into()));
        };
        let candidate = self.insert_candidate(&doc, &generated).await?;
        let record = json!({
            "cases": report.cases,
            "acceptedByPeer": report.failure_description(),
        });
        self.store
            .record_handler_verification(candidate.id, true, &record)
            .await?;
        generated.compiled = self
            .check_compiled(&doc, &generated, &report, candidate.id)
            .await?;
        negotiation.handler_id = Some(candidate.id);
        negotiation.handler = Some(generated);
        Ok(Ok(()))
    }

    /// Regenerates the handler of the agreed protocol from a failure description.
    pub(super) async fn rebuild(
        &self,
        negotiation: &mut Negotiation,
        failure: &str,
    ) -> Result<Built, ApiError> {
        let Some((_, text)) = negotiation.session.agreed().map(|(h, t)| (h, t.to_owned())) else {
            return Ok(Built::Failed("no protocol is agreed".into()));
        };
        let source = match negotiation.handler.clone() {
            Some(previous) => Source::Fix(previous, failure.to_owned()),
            None => Source::Generate(None),
        };
        self.build_handler(&text, source, negotiation).await
    }

    /// Runs test cases the peer proposed against the current handler: accepted when it passes
    /// them all.
    pub(super) async fn evaluate_test_cases(
        &self,
        negotiation: &Negotiation,
        text: &str,
    ) -> Result<Verdict, ApiError> {
        let reject = |reason: String| Ok(Verdict::Reject { reason });
        let cases = match parley_anp::parse_test_cases_within(text, &self.limits.doc_limits()) {
            Ok(c) if !c.is_empty() => c,
            Ok(_) => return reject("no test cases".into()),
            Err(e) => return reject(e.to_string()),
        };
        let (Some((_, agreed)), Some(handler)) =
            (negotiation.session.agreed(), negotiation.handler.as_ref())
        else {
            return reject("no handler to test yet".into());
        };
        let doc = match ProtocolDoc::parse(agreed) {
            Ok(d) => d,
            Err(e) => return reject(e.to_string()),
        };
        match self.run_cases(&doc, &cases, handler).await {
            Ok(report) if report.passed() => Ok(Verdict::Accept),
            Ok(report) => reject(report.failure_description()),
            Err(e) => reject(e),
        }
    }

    async fn run_cases(
        &self,
        doc: &ProtocolDoc,
        cases: &[TestCase],
        handler: &GeneratedHandler,
    ) -> Result<VerificationReport, String> {
        self.runner
            .verify(
                doc,
                cases,
                Dialect::JavaScript,
                &handler.source,
                &handler.grants,
            )
            .await
            .map_err(|e| e.to_string())
    }
}

/// How a verification that still fails once our own fixes are exhausted ends: schema-valid
/// answers that differ only from the peer's expectations point at the expectations, so the
/// handler is kept, disputed, while the peer is asked; anything else, and any failure of the
/// cases written here, is our failure.
fn give_up(
    negotiation: &mut Negotiation,
    cases: &Cases,
    handler: GeneratedHandler,
    report: VerificationReport,
    failure: String,
) -> Built {
    if cases.origin != Origin::Generated && expectation_only(&report) {
        negotiation.disputed = Some(Disputed { handler, report });
        Built::PeerExpectation(failure)
    } else {
        Built::Failed(failure)
    }
}

/// Whether every failed case answered within the response schema, failing only on the
/// expected values.
fn expectation_only(report: &VerificationReport) -> bool {
    report.failed().all(|c| {
        c.response.is_some()
            && !c
                .failures
                .iter()
                .any(|f| f.starts_with("response schema violation"))
    })
}
