//! Images: code-less modules that define the runtime's memory, import the runtime's host functions
//! and re-export them. The base image carries the runtime's own data segments; a handler image,
//! the memory as the handler's top-level code left it.

use std::ops::Range;

use wasm_encoder::{EntityType, MemoryType};

use super::IMAGE_MEMORY;

/// Prefix of an image's re-exports of the host functions, by the runtime's import index.
const IMPORT_EXPORT_PREFIX: &str = "parley:import:";

/// Bytes of a wasm page (custom page sizes are refused).
const WASM_PAGE: usize = 64 * 1024;
/// Zero runs shorter than this are kept inside a data segment rather than splitting it: a segment
/// costs a few bytes of header, and fewer, larger segments keep the module small and quick to parse.
const SEGMENT_GAP: usize = 1024;
/// Most data segments a handler image gets (wasmparser refuses more than 100,000); past it the gap
/// that splits segments grows.
const MAX_SEGMENTS: usize = 10_000;

/// The shape shared by the base image and every handler image: the runtime's memory type and host
/// function imports.
#[derive(Debug, Clone)]
pub(crate) struct ImageLayout {
    pub(super) memory: wasmparser::MemoryType,
    imports: Vec<HostImport>,
}

/// One function the runtime imports from the host.
#[derive(Debug, Clone)]
pub(super) struct HostImport {
    pub(super) module: String,
    pub(super) name: String,
    pub(super) params: Vec<wasm_encoder::ValType>,
    pub(super) results: Vec<wasm_encoder::ValType>,
}

/// `memory` with `minimum` pages, for wasm-encoder.
pub(super) fn encoder_memory(memory: &wasmparser::MemoryType, minimum: u64) -> MemoryType {
    MemoryType {
        minimum,
        maximum: memory.maximum,
        memory64: false,
        shared: false,
        page_size_log2: None,
    }
}

impl ImageLayout {
    pub(super) fn new(memory: wasmparser::MemoryType, imports: Vec<HostImport>) -> Self {
        ImageLayout { memory, imports }
    }

    /// How many host functions an image re-exports.
    pub(crate) fn functions(&self) -> usize {
        self.imports.len()
    }

    /// The name under which an image re-exports the runtime's `index`-th host function.
    pub(crate) fn function_export(index: usize) -> String {
        format!("{IMPORT_EXPORT_PREFIX}{index}")
    }

    /// An image module without data: the host function imports, the memory with `minimum` pages,
    /// and the exports.
    pub(super) fn module(&self, minimum: u64) -> wasm_encoder::Module {
        let mut module = wasm_encoder::Module::new();
        let mut types = wasm_encoder::TypeSection::new();
        let mut imports = wasm_encoder::ImportSection::new();
        let mut exports = wasm_encoder::ExportSection::new();
        for (index, import) in self.imports.iter().enumerate() {
            types.ty().function(
                import.params.iter().copied(),
                import.results.iter().copied(),
            );
            imports.import(
                &import.module,
                &import.name,
                EntityType::Function(index as u32),
            );
            exports.export(
                &Self::function_export(index),
                wasm_encoder::ExportKind::Func,
                index as u32,
            );
        }
        exports.export(IMAGE_MEMORY, wasm_encoder::ExportKind::Memory, 0);
        let mut memories = wasm_encoder::MemorySection::new();
        memories.memory(encoder_memory(&self.memory, minimum));
        if !types.is_empty() {
            module.section(&types).section(&imports);
        }
        module.section(&memories).section(&exports);
        module
    }

    /// The handler image for `memory`, the bytes of the runtime's memory after a handler's
    /// top-level code ran (a whole number of pages): its minimum is the memory's current size, its
    /// maximum the runtime's, and its contents are active data segments over the non-zero parts of
    /// `memory`.
    pub(crate) fn handler_image(&self, memory: &[u8]) -> Vec<u8> {
        let pages = memory.len().div_ceil(WASM_PAGE) as u64;
        let mut gap = SEGMENT_GAP;
        let mut segments = non_zero_runs(memory, gap);
        while segments.len() > MAX_SEGMENTS {
            gap *= 4;
            segments = non_zero_runs(memory, gap);
        }
        let mut module = self.module(pages);
        let mut data = wasm_encoder::DataSection::new();
        for run in segments {
            // Offsets below 4 GiB: i32.const takes them as the same bits, signed.
            let offset = wasm_encoder::ConstExpr::i32_const(run.start as u32 as i32);
            data.active(0, &offset, memory[run].iter().copied());
        }
        module.section(&data);
        module.finish()
    }
}

/// The runs of `memory` holding non-zero bytes, joined across zero gaps shorter than `gap`.
pub(super) fn non_zero_runs(memory: &[u8], gap: usize) -> Vec<Range<usize>> {
    let mut runs: Vec<Range<usize>> = Vec::new();
    let mut at = 0;
    while let Some(start) = memory[at..].iter().position(|&b| b != 0).map(|i| at + i) {
        let end = memory[start..]
            .iter()
            .position(|&b| b == 0)
            .map_or(memory.len(), |i| start + i);
        match runs.last_mut() {
            Some(last) if start - last.end < gap => last.end = end,
            _ => runs.push(start..end),
        }
        at = end;
    }
    runs
}
