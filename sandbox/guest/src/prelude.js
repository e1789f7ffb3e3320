// Parley guest prelude. Evaluated once, before the handler source, while the snapshot is being made.
//
// It receives the native functions the Rust side of the guest provides and returns the driver.
// Everything the driver relies on (JSON.stringify, WeakSet methods, ...) is captured here,
// before any handler code runs, so a handler that overwrites globals cannot change how its input is
// parsed, how its output is serialised or how its errors are classified.
(function (nativeCall, nativeLog, nativeResult, nativeArgs) {
  "use strict";
  const apply = Reflect.apply;
  const objectPrototype = Object.prototype;
  const arrayPrototype = Array.prototype;
  const stringify = JSON.stringify;
  const toStr = String;
  const isArray = Array.isArray;
  const arrayJoin = Array.prototype.join;
  const arrayMap = Array.prototype.map;
  const PromiseCtor = Promise;
  const promiseThen = Promise.prototype.then;
  const ErrorCtor = Error;
  const RangeErrorCtor = RangeError;
  const InternalErrorCtor = typeof InternalError === "function" ? InternalError : undefined;
  const setHas = WeakSet.prototype.has;
  const setAdd = WeakSet.prototype.add;
  const capabilityErrors = new WeakSet();

  // Result kinds reported to the host; must match `OutcomeKind` in parley-sandbox.
  const OK = 0, THREW = 1, INVALID_OUTPUT = 2, CAPABILITY_FAILED = 3, STACK_OVERFLOW = 7;

  class CapabilityError extends ErrorCtor {}
  Object.defineProperty(CapabilityError.prototype, "name", { value: "CapabilityError" });

  function safeString(value) {
    try {
      if (value instanceof ErrorCtor) {
        const name = toStr(value.name);
        const message = toStr(value.message);
        const head = message ? name + ": " + message : name;
        // The stack names handler.js lines: what a reasoner needs to fix the handler.
        const stack = typeof value.stack === "string" ? value.stack : "";
        return stack ? head + "\n" + stack : head;
      }
      if (typeof value === "string") return value;
      const json = stringify(value);
      return json === undefined ? toStr(value) : json;
    } catch (_) {
      try {
        return toStr(value);
      } catch (_) {
        return "<a value that cannot be described>";
      }
    }
  }

  function callCapability(name, args) {
    if (typeof name !== "string") {
      throw new TypeError("host.call: the capability name must be a string");
    }
    const value = args === undefined ? null : args;
    // null: the guest's JSON writer wrote plain-data arguments itself (see `serialise`).
    let json = null;
    if (!nativeArgs(value, objectPrototype, arrayPrototype)) {
      json = stringify(value);
      if (json === undefined) {
        throw new TypeError("host.call: the arguments are not JSON-serialisable");
      }
    }
    // nativeCall returns [true, result] (parsed already) or [false, errorMessage]. A refused
    // capability or oversized arguments never return here: the host ends the whole call.
    const reply = nativeCall(name, json);
    if (reply[0] === true) return reply[1];
    const error = new CapabilityError("capability " + name + " failed: " + reply[1]);
    apply(setAdd, capabilityErrors, [error]);
    throw error;
  }

  function logger(level) {
    return function (...args) {
      nativeLog(level, apply(arrayJoin, apply(arrayMap, args, [safeString]), [" "]));
    };
  }

  const host = Object.freeze({ call: callCapability });
  const console = Object.freeze({
    log: logger(0),
    info: logger(0),
    debug: logger(0),
    warn: logger(1),
    error: logger(2),
  });
  const hidden = { enumerable: false, writable: false, configurable: false };
  Object.defineProperty(globalThis, "host", { ...hidden, value: host });
  Object.defineProperty(globalThis, "console", { ...hidden, value: console });

  function classify(error) {
    if (error !== null && typeof error === "object" && apply(setHas, capabilityErrors, [error])) {
      return [CAPABILITY_FAILED, toStr(error.message)];
    }
    if (
      (error instanceof RangeErrorCtor && error.message === "Maximum call stack size exceeded") ||
      (InternalErrorCtor !== undefined && error instanceof InternalErrorCtor &&
        /^stack overflow/.test(error.message))
    ) {
      return [STACK_OVERFLOW, safeString(error)];
    }
    return [THREW, safeString(error)];
  }

  function serialise(value) {
    let json;
    try {
      // Plain data is written by the guest's own JSON writer, straight to the host (the text is
      // then null); anything else by JSON.stringify.
      if (nativeResult(value, objectPrototype, arrayPrototype)) return [OK, null];
      json = stringify(value);
    } catch (error) {
      return [INVALID_OUTPUT, "the handler's result is not JSON-serialisable: " + safeString(error)];
    }
    if (json === undefined) {
      return [INVALID_OUTPUT, "the handler returned " + typeof value + ", which is not JSON"];
    }
    return [OK, json];
  }

  // The driver factory: called once with the handler's `handle` function after the handler source has
  // been evaluated. It returns `run(request)` (the input, parsed by the guest), which returns
  // [kind, text], or `null` when the handler returned a promise: the guest then drains the job queue
  // and calls `settled()`.
  return function driver(handle) {
    let settledResult = null;
    function run(request) {
      let result;
      try {
        result = handle(request);
      } catch (error) {
        return classify(error);
      }
      if (result instanceof PromiseCtor) {
        apply(promiseThen, result, [
          (value) => { settledResult = serialise(value); },
          (error) => { settledResult = classify(error); },
        ]);
        return null;
      }
      return serialise(result);
    }
    function settled() {
      return settledResult === null
        ? [THREW, "the handler's promise never settled"]
        : settledResult;
    }
    return [run, settled];
  };
})
