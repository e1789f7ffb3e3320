//! The integration tests of `parley-nlip`, in one test binary: the codecs on examples
//! (`codec`), their properties (`codec_props`, `cbor_props`), and the plain reference decoder
//! both hold the production readers to (`reference`).

mod cbor_props;
mod codec;
mod codec_props;
mod reference;
