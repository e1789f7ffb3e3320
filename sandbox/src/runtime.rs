//! The compiled runtime: the shared code module, the base image, and how an instance of the code is
//! put together over a memory image in a store.
//!
//! A sandbox compiles the runtime's code once (or loads it from the artifact cache) and every
//! handler shares that native code; a handler is only a memory image (see `split.rs`). A call, or a
//! publish, instantiates an image (its memory, copy-on-write from the image, and the host functions
//! of its phase, resolved once per image through an `InstancePre`) and then the code module over
//! that memory and those functions.

use std::sync::Arc;

use sha2::{Digest, Sha256};
use wasmtime::{Engine, Instance, InstancePre, Linker, Module, ModuleExport, Store, Val};

use crate::SandboxInner;
use crate::error::SandboxError;
use crate::host::{CallState, Phase};
use crate::split::{IMAGE_MEMORY, IMAGE_MODULE, ImageLayout, Split};

/// A compiled memory image (the base image or a handler's), linked with the host functions of one
/// phase: a module with no code that imports the host functions, defines one memory, and exports
/// both.
#[derive(Clone)]
pub(crate) struct Image {
    pre: InstancePre<CallState>,
    memory: ModuleExport,
    /// The re-exported host functions, in the runtime's import order.
    functions: Vec<ModuleExport>,
}

impl Image {
    /// Prepares `module` (a compiled image of `layout`) for instantiation with `linker`'s host
    /// functions.
    pub(crate) fn new(
        module: &Module,
        layout: &ImageLayout,
        linker: &Linker<CallState>,
    ) -> Result<Self, SandboxError> {
        let export = |name: &str| export_index(module, name, "a memory image");
        let memory = export(IMAGE_MEMORY)?;
        let functions = (0..layout.functions())
            .map(|index| export(&ImageLayout::function_export(index)))
            .collect::<Result<_, _>>()?;
        let pre = linker
            .instantiate_pre(module)
            .map_err(|e| SandboxError::wasmtime("linking a memory image", e))?;
        Ok(Image {
            pre,
            memory,
            functions,
        })
    }
}

/// The runtime's code, compiled once per sandbox, and everything needed to instantiate it.
pub(crate) struct Runtime {
    code: Module,
    /// The runtime's own memory image, linked for publishing, that publishing starts from.
    pub(crate) base: Image,
    /// The host functions of a call, with every unknown function import defined as a trap: what
    /// handler images are linked with.
    call_linker: Linker<CallState>,
    /// Export names of the runtime's mutable globals.
    globals: Vec<String>,
    /// The entry points every call uses, found once rather than by name in every call.
    pub(crate) entry: Entry,
    /// The shape of every image.
    pub(crate) layout: ImageLayout,
}

/// The index of `module`'s export `name`, or an internal error naming `what` lacks it.
fn export_index(module: &Module, name: &str, what: &str) -> Result<ModuleExport, SandboxError> {
    module
        .get_export_index(name)
        .ok_or_else(|| SandboxError::internal(format!("{what} does not export `{name}`")))
}

/// The code module's exports a call or a publish uses.
#[derive(Clone)]
pub(crate) struct Entry {
    pub(crate) load: ModuleExport,
    pub(crate) run: ModuleExport,
    pub(crate) memory: ModuleExport,
}

impl Entry {
    fn of(code: &Module) -> Result<Entry, SandboxError> {
        let export = |name: &str| export_index(code, name, "the runtime");
        Ok(Entry {
            load: export("parley_load")?,
            run: export("parley_run")?,
            memory: export("memory")?,
        })
    }

    /// A function export of `instance` with its signature checked.
    pub(crate) fn func<P: wasmtime::WasmParams, R: wasmtime::WasmResults>(
        instance: &Instance,
        store: &mut Store<CallState>,
        export: &ModuleExport,
    ) -> wasmtime::Result<wasmtime::TypedFunc<P, R>> {
        instance
            .get_module_export(&mut *store, export)
            .and_then(wasmtime::Extern::into_func)
            .ok_or_else(|| wasmtime::Error::msg("a runtime entry point is missing"))?
            .typed::<P, R>(&*store)
    }

    /// The linear memory of `instance`.
    pub(crate) fn memory(
        &self,
        instance: &Instance,
        store: &mut Store<CallState>,
    ) -> wasmtime::Result<wasmtime::Memory> {
        instance
            .get_module_export(&mut *store, &self.memory)
            .and_then(wasmtime::Extern::into_memory)
            .ok_or_else(|| wasmtime::Error::msg("the runtime exports no memory"))
    }
}

/// Version of this crate's artifact format and guest ABI; bump to invalidate every cached artifact.
const ARTIFACT_FORMAT: &str = "parley-sandbox-artifact-v3";

/// The cache key of the compiled runtime code: sha256 over everything the artifact depends on.
/// `code_sha256`, the hash of the code module itself, makes any change to the split transform a
/// new key too.
fn cache_key(runtime_sha256: &str, code_sha256: &str, engine: &Engine) -> String {
    let mut hasher = Sha256::new();
    for part in [
        ARTIFACT_FORMAT,
        "runtime-code",
        runtime_sha256,
        code_sha256,
        crate::cache::WASMTIME_VERSION,
        &format!("{:016x}", crate::engine::compatibility_digest(engine)),
    ] {
        hasher.update(part.as_bytes());
        hasher.update([0]);
    }
    hex::encode(hasher.finalize())
}

impl Runtime {
    /// Loads the runtime's compiled code from the artifact cache, or compiles it (and caches it).
    /// `runtime_sha256` is the hash of the runtime `split` came from. Returns whether it compiled.
    pub(crate) fn load_or_compile(
        sandbox: &SandboxInner,
        split: &Split,
        runtime_sha256: &str,
    ) -> Result<(Runtime, bool), SandboxError> {
        let engine = &sandbox.engine;
        let key = cache_key(
            runtime_sha256,
            &hex::encode(Sha256::digest(&split.code)),
            engine,
        );
        let cached = sandbox
            .cache
            .as_ref()
            .and_then(|cache| cache.load(engine, &key));
        let compiled = cached.is_none();
        let code = match cached {
            Some(code) => {
                tracing::debug!("sandbox: runtime code loaded from the artifact cache");
                code
            }
            None => {
                let started = std::time::Instant::now();
                let code = Module::new(engine, &split.code).map_err(|e| SandboxError::Compile {
                    source: Box::new(crate::error::WasmtimeError(format!("{e:#}"))),
                })?;
                tracing::info!(elapsed = ?started.elapsed(), "sandbox: runtime code compiled");
                if let Some(cache) = &sandbox.cache {
                    cache.store(&key, &code);
                }
                code
            }
        };
        if let Some(cache) = &sandbox.cache {
            cache.sweep(&key, crate::cache::STALE_AFTER);
        }
        let base = Module::new(engine, &split.base_image)
            .map_err(|e| SandboxError::wasmtime("compiling the runtime's memory image", e))?;
        // Anything the runtime imports beyond the linker's functions traps when called instead of
        // failing instantiation; the runtime imports nothing else, so this only matters for a
        // corrupted build.
        let linker = |phase| -> Result<Linker<CallState>, SandboxError> {
            let mut linker = crate::host::linker(engine, phase)?;
            linker
                .define_unknown_imports_as_traps(&code)
                .map_err(|e| SandboxError::wasmtime("linking the runtime", e))?;
            Ok(linker)
        };
        // `split` puts the memory import after the host functions; `instantiate` relies on it.
        let memory_last = code
            .imports()
            .last()
            .is_some_and(|import| import.module() == IMAGE_MODULE && import.name() == IMAGE_MEMORY);
        if !memory_last || code.imports().len() != split.layout.functions() + 1 {
            return Err(SandboxError::internal(
                "the runtime code does not import its host functions and then its memory",
            ));
        }
        let base = Image::new(&base, &split.layout, &linker(Phase::Publish)?)?;
        Ok((
            Runtime {
                entry: Entry::of(&code)?,
                call_linker: linker(Phase::Call)?,
                code,
                base,
                globals: split.globals.clone(),
                layout: split.layout.clone(),
            },
            compiled,
        ))
    }

    /// A compiled handler image, linked for calls.
    pub(crate) fn handler_image(&self, module: &Module) -> Result<Image, SandboxError> {
        Image::new(module, &self.layout, &self.call_linker)
    }

    /// An instance of the runtime in `store`, over a fresh instance of `image`: its memory
    /// (copy-on-write from the image) and the host functions it was linked with.
    pub(crate) async fn instantiate(
        &self,
        store: &mut Store<CallState>,
        image: &Image,
    ) -> wasmtime::Result<Instance> {
        let instance = image.pre.instantiate_async(&mut *store).await?;
        let mut export = |export: &ModuleExport| {
            instance
                .get_module_export(&mut *store, export)
                .ok_or_else(|| wasmtime::Error::msg("a memory image lacks an export"))
        };
        // The code module's imports: the host functions, then the memory.
        let imports = image
            .functions
            .iter()
            .chain(std::iter::once(&image.memory))
            .map(&mut export)
            .collect::<wasmtime::Result<Vec<_>>>()?;
        Instance::new_async(&mut *store, &self.code, &imports).await
    }

    /// The values of the runtime's mutable globals in `instance`, as bits, by export name.
    pub(crate) fn globals(
        &self,
        store: &mut Store<CallState>,
        instance: &Instance,
    ) -> Result<Vec<(&str, u64)>, SandboxError> {
        self.globals
            .iter()
            .map(|name| {
                let value = instance
                    .get_global(&mut *store, name)
                    .map(|global| global.get(&mut *store));
                let bits = match value {
                    Some(Val::I32(v)) => u64::from(v as u32),
                    Some(Val::I64(v)) => v as u64,
                    Some(Val::F32(bits)) => u64::from(bits),
                    Some(Val::F64(bits)) => bits,
                    _ => {
                        return Err(SandboxError::internal(format!(
                            "the runtime's global `{name}` is missing or not a number"
                        )));
                    }
                };
                Ok((name.as_str(), bits))
            })
            .collect()
    }
}

/// The runtime of a sandbox: split at `Sandbox::new`, compiled (or loaded) on first need.
pub(crate) enum RuntimeState {
    Split(Box<Split>),
    Ready(Arc<Runtime>),
}
