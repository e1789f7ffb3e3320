//! A requester's run-time `fixErrorNegotiation` (`negotiation::fix_report`): an answer of a
//! protocol this provider serves broke the protocol, says the requester, after the negotiation
//! is long over.
//!
//! The provider checks again before it believes it: the reported request goes through the
//! active handler (as a call would, its capabilities called for real) and the answer against the
//! response schema, and the test cases the handler was verified against (the document's, or
//! those its verification record keeps) run through the handler's source (answered from their
//! fixtures, as at negotiation). When neither shows a fault the requester is told so
//! (`rejected`, with the handler's answer). A fault is rebuilt the way a negotiation rebuilds a
//! handler from a peer's report (`build_handler` with the fault as the failure: the reasoner's
//! `fix_handler`, verification against the test cases, bounded fixes). The rebuilt handler must
//! also answer the reported request within the response schema (read-only capabilities are
//! called for real, others have no fixture and fail, so such a request is refused rather than
//! answered from a guess) and, when the document has no test cases of its own, pass those its
//! previous version was verified against. It is then stored as a new handler version of the same
//! protocol hash, activated (the previous version is retired) and served from this instance's
//! cache at once: `accepted`. A rebuild that fails is `rejected` with the reason; the active
//! handler stays. Either way the decision is audited (`handler.fix`) before it is answered, and
//! what the model calls cost goes to the metrics (a report belongs to no conversation).

use std::sync::Arc;

use parley_anp::{Fixtures, MatchMode, ProtocolDoc, SchemaRole, TestCase};
use parley_reasoner::GeneratedHandler;
use parley_sandbox::Dialect;
use parley_store::HandlerRecord;
use serde_json::{Value, json};
use uuid::Uuid;

use super::Provider;
use super::build::{Built, Source};
use super::cases::verified_cases;
use super::serve::check;
use super::state::Negotiation;
use crate::audit::Actor;
use crate::error::ApiError;
use crate::host::CapabilityBridge;
use crate::negotiation::fix_report::{FixAnswer, FixReport};
use crate::negotiation::runner::{ActiveProtocol, publish_serving};

impl Provider {
    /// Answers `peer`'s report that an answer of an active protocol was wrong: the handler is
    /// fixed (a new version serves) or the report refused with the reasons. The caller's right
    /// to call the protocol was checked by the route; an unknown protocol is
    /// `unknown_protocol`.
    pub async fn fix_reported(
        &self,
        report: &FixReport,
        peer: &str,
    ) -> Result<FixAnswer, ApiError> {
        let hex = report.hash.to_string();
        let active = self.active(&report.hash).await?;
        let record = self
            .store
            .active_handler(&hex)
            .await?
            .ok_or_else(|| ApiError::UnknownProtocol(hex.clone()))?;
        let mut working = self.working_negotiation();
        let decided = self.decide(report, &active, &record, &mut working).await;
        crate::model_usage::settle(self.store.as_ref(), None, &working.meter).await;
        let (fixed, answer) = decided?;
        let said = match &answer {
            FixAnswer::Fixed { description } => description,
            FixAnswer::Refused { reason } => reason,
        };
        tracing::info!(protocol = %hex, peer, fixed = ?fixed, "run-time error report answered");
        let actor = Actor::current_or(peer);
        self.audit
            .handler_fix(&actor, &hex, record.id, fixed, said)
            .await;
        Ok(answer)
    }

    /// The working state `build_handler` fills in: a negotiation in name only, never stored,
    /// whose meter counts the rebuild's model calls.
    fn working_negotiation(&self) -> Negotiation {
        Negotiation::begun(Uuid::nil(), self.limits.max_rounds)
    }

    /// Checks the report, rebuilds and activates when the handler is at fault: the new handler
    /// version, if any, and the answer.
    async fn decide(
        &self,
        report: &FixReport,
        active: &ActiveProtocol,
        record: &HandlerRecord,
        working: &mut Negotiation,
    ) -> Result<(Option<Uuid>, FixAnswer), ApiError> {
        let refuse = |reason: String| Ok((None, FixAnswer::Refused { reason }));
        if let Err(v) = check(&active.doc, SchemaRole::Request, &report.request).await {
            return refuse(format!(
                "the reported request does not follow the protocol's request schema: {v}"
            ));
        }
        let fault = match self.recheck(report, active, record).await? {
            Recheck::Fault(fault) => fault,
            Recheck::Conforms(answer) => {
                return refuse(format!(
                    "the active handler's answer to the reported request follows the response \
                     schema ({answer}) and the handler passes the {} test cases it was verified \
                     against",
                    verified_cases(&active.doc, record).len()
                ));
            }
        };
        let previous = GeneratedHandler {
            source: record.source.clone(),
            grants: record.capabilities.clone(),
            compiled: None,
        };
        let failure = format!(
            "{}\n\n## Checked again by the provider\n\n{fault}",
            report.description
        );
        let text = active.doc.text().to_owned();
        let built = self
            .build_handler(&text, Source::Fix(previous, failure), working)
            .await?;
        if let Built::Failed(why) | Built::PeerExpectation(why) = built {
            return refuse(format!(
                "the handler is at fault ({fault}), but no fixed version passed verification: {why}"
            ));
        }
        let (Some(id), Some(generated)) = (working.handler_id, working.handler.take()) else {
            return Err(ApiError::internal("a verified rebuild without a handler"));
        };
        if let Some(still) = self
            .fixed_fails(&active.doc, &report.request, record, &generated)
            .await
        {
            return refuse(format!(
                "the handler is at fault ({fault}), but its fixed version does not answer the \
                 reported request within the protocol either, or fails a test case its previous \
                 version was verified against: {still}"
            ));
        }
        self.store.activate_handler(id).await?;
        let handler = publish_serving(
            &self.sandbox,
            &generated.source,
            generated.compiled.as_ref(),
        )
        .await
        .map_err(ApiError::internal)?;
        self.cache.insert(
            report.hash,
            id,
            ActiveProtocol {
                doc: Arc::clone(&active.doc),
                handler,
                grants: generated.grants.iter().cloned().collect(),
            },
        );
        let description = format!(
            "handler {id} replaces handler {} for protocol {}: it passes the protocol's test \
             cases and answers the reported request within the response schema. The fault: {fault}",
            record.id, report.hash
        );
        Ok((Some(id), FixAnswer::Fixed { description }))
    }

    /// Runs the reported request through the active handler and the test cases through its
    /// source.
    async fn recheck(
        &self,
        report: &FixReport,
        active: &ActiveProtocol,
        record: &HandlerRecord,
    ) -> Result<Recheck, ApiError> {
        let mut faults = Vec::new();
        let host =
            CapabilityBridge::new(self.capabilities.clone(), tokio::runtime::Handle::current());
        let answer = match self
            .sandbox
            .call(&active.handler, &report.request, &active.grants, host)
            .await
        {
            Ok(out) => {
                if let Err(v) = check(&active.doc, SchemaRole::Response, &out.output).await {
                    faults.push(format!(
                        "its answer to the reported request, `{}`, breaks the response schema: {v}",
                        out.output
                    ));
                }
                Some(out.output)
            }
            Err(e) => {
                faults.push(format!(
                    "it fails on the reported request: {}: {e}",
                    e.code()
                ));
                None
            }
        };
        let cases = verified_cases(&active.doc, record);
        let verified = self
            .runner
            .verify(
                &active.doc,
                &cases,
                Dialect::JavaScript,
                &record.source,
                &record.capabilities,
            )
            .await;
        match verified {
            Ok(report) if report.passed() => {}
            Ok(report) => faults.push(report.failure_description()),
            Err(e) => faults.push(format!("it does not load: {}: {e}", e.code())),
        }
        Ok(match (faults.is_empty(), answer) {
            (true, Some(answer)) => Recheck::Conforms(answer),
            _ => Recheck::Fault(faults.join("\n")),
        })
    }

    /// What is wrong with the rebuilt handler `generated`: its answer to `request` (verified as a
    /// test case that expects only the response schema) and, for a protocol without test cases
    /// of its own, the cases the previous version was verified against (`build_handler`
    /// verified it against the document's, or against cases of its own choosing); `None` when
    /// nothing is.
    async fn fixed_fails(
        &self,
        doc: &ProtocolDoc,
        request: &Value,
        previous: &HandlerRecord,
        generated: &GeneratedHandler,
    ) -> Option<String> {
        let mut cases = if doc.test_cases().is_empty() {
            verified_cases(doc, previous)
        } else {
            Vec::new()
        };
        cases.push(TestCase {
            name: "the reported request".into(),
            description: None,
            request: request.clone(),
            expected_response: json!({}),
            match_mode: MatchMode::Subset,
            fixtures: Fixtures::default(),
            checks: Vec::new(),
        });
        let verified = self
            .runner
            .verify(
                doc,
                &cases,
                Dialect::JavaScript,
                &generated.source,
                &generated.grants,
            )
            .await;
        match verified {
            Ok(report) if report.passed() => None,
            Ok(report) => {
                let failures: Vec<&str> = report
                    .failed()
                    .flat_map(|case| case.failures.iter().map(String::as_str))
                    .collect();
                Some(failures.join("; "))
            }
            Err(e) => Some(format!("it does not load: {}: {e}", e.code())),
        }
    }
}

/// What checking a report again showed.
enum Recheck {
    /// The handler's answer to the reported request (within the schema, the test cases pass).
    Conforms(Value),
    /// What is wrong with the handler.
    Fault(String),
}
