//! ANP 1.2's JSON-RPC request reader on arbitrary bytes, then `anp.negotiate`'s parameter
//! reader on what it reads. A refusal carries a JSON-RPC standard code; parameters are refused
//! with -32602 or one of the draft's 1600–1608; every candidate read names its document's hash.
#![no_main]

use libfuzzer_sys::fuzz_target;
use parley_anp::ProtocolHash;
use parley_anp::rpc::{Envelope, NegotiateParams, RpcError};

fuzz_target!(|data: &[u8]| {
    let envelope = match Envelope::parse(data) {
        Ok(envelope) => envelope,
        Err(refused) => {
            assert!(
                [RpcError::PARSE_ERROR, RpcError::INVALID_REQUEST, RpcError::INVALID_PARAMS]
                    .contains(&refused.error.code)
            );
            return;
        }
    };
    match NegotiateParams::read(&envelope.params, 64) {
        Ok(params) => {
            assert!(params.candidates.len() <= 64);
            for candidate in &params.candidates {
                if let Some(document) = &candidate.document {
                    assert_eq!(candidate.hash, ProtocolHash::of(document));
                }
            }
        }
        Err(e) => assert!(e.code == RpcError::INVALID_PARAMS || e.anp_code().is_some()),
    }
});
