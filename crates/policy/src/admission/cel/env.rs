//! The CEL environment every program runs in: `cel`'s standard library, its
//! strings extension, and the parts of Kubernetes' CEL libraries that
//! provider CRDs use (list functions, regex `find`, `sets`). Built once.

use std::cell::RefCell;
use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use cel::common::types::{
    CelBool, CelDouble, CelInt, CelList, CelString, CelUInt, DYN_TYPE, INT_TYPE, LIST_TYPE,
    STRING_TYPE,
};
use cel::common::value::{CowVal, Val};
use cel::{DeclarationError, Env, ExecutionError};

use super::budget;

/// The bounded replacement the compiler substitutes for `string.replace`.
pub(super) const REPLACE_FN: &str = "@mrguard_replace";

/// What the compiler substitutes for `matches`: the same function with the
/// compiled regex cached. `cel`'s own compiles the pattern on every call,
/// which was 290 k instructions of a 630 k request with ten rules, one of
/// them a `matches` (callgrind, BENCHMARKS.md).
pub(super) const MATCHES_FN: &str = "@mrguard_matches";

pub(crate) static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| match build() {
    Ok(env) => Arc::new(env),
    // Only reachable through a conflicting declaration below, which the
    // unit tests would catch first.
    Err(e) => panic!("failed to build the CEL environment: {e}"),
});

/// Functions a program may call, besides operators and macros. Anything else
/// is rejected when the program compiles, so a rule never fails at run time
/// for lack of a function. Namespaced ones are spelled in full.
pub const FUNCTIONS: &[&str] = &[
    // standard library
    "size",
    "contains",
    "startsWith",
    "endsWith",
    "matches",
    "int",
    "uint",
    "double",
    "string",
    "bool",
    "bytes",
    "dyn",
    "type",
    "duration",
    "timestamp",
    "getFullYear",
    "getMonth",
    "getDate",
    "getDayOfMonth",
    "getDayOfWeek",
    "getDayOfYear",
    "getHours",
    "getMinutes",
    "getSeconds",
    "getMilliseconds",
    "optional.of",
    "optional.none",
    "optional.ofNonZeroValue",
    "hasValue",
    "value",
    "or",
    "orValue",
    // strings extension (Kubernetes' ext.Strings)
    "charAt",
    "indexOf",
    "lastIndexOf",
    "join",
    "lowerAscii",
    "upperAscii",
    "trim",
    "replace",
    "split",
    "substring",
    "format",
    "strings.quote",
    "reverse",
    // Kubernetes' list library
    "isSorted",
    "sum",
    "min",
    "max",
    // Kubernetes' regex library
    "find",
    "findAll",
    // cel-go's sets extension, as Kubernetes enables it
    "sets.contains",
    "sets.equivalent",
    "sets.intersects",
];

/// Functions whose work does not grow with their operands: the compiler
/// does not charge for what is handed to them.
pub(super) const CONSTANT_COST: &[&str] = &[
    "_[_]",
    "_[?_]",
    "_?._",
    "size",
    "int",
    "uint",
    "double",
    "bool",
    "dyn",
    "type",
    "hasValue",
    "value",
    "or",
    "orValue",
    "optional.of",
    "optional.none",
    "optional.ofNonZeroValue",
    "getFullYear",
    "getMonth",
    "getDate",
    "getDayOfMonth",
    "getDayOfWeek",
    "getDayOfYear",
    "getHours",
    "getMinutes",
    "getSeconds",
    "getMilliseconds",
    "_<_",
    "_<=_",
    "_>_",
    "_>=_",
    "_-_",
    "_*_",
    "_/_",
    "_%_",
    "-_",
];

fn build() -> Result<Env, DeclarationError> {
    let mut env = Env::stdlib();
    env.add_extension(cel::extensions::strings)?;
    env.add_overload(
        budget::COST_FN,
        "mrguard_cost",
        vec![DYN_TYPE],
        budget::cost_fn,
    )?;
    let s = || STRING_TYPE;
    env.add_member_overload(REPLACE_FN, "mrguard_replace", s(), vec![s(), s()], replace)?;
    env.add_member_overload(
        REPLACE_FN,
        "mrguard_replace_n",
        s(),
        vec![s(), s(), INT_TYPE],
        replace,
    )?;
    env.add_member_overload(MATCHES_FN, "mrguard_matches", s(), vec![s()], matches)?;
    env.add_overload(
        MATCHES_FN,
        "mrguard_matches_global",
        vec![s(), s()],
        matches,
    )?;
    env.add_member_overload("isSorted", "list_is_sorted", LIST_TYPE, vec![], is_sorted)?;
    env.add_member_overload("sum", "list_sum", LIST_TYPE, vec![], sum)?;
    env.add_member_overload("min", "list_min", LIST_TYPE, vec![], min)?;
    env.add_member_overload("max", "list_max", LIST_TYPE, vec![], max)?;
    env.add_member_overload(
        "indexOf",
        "list_index_of",
        LIST_TYPE,
        vec![DYN_TYPE],
        list_index_of,
    )?;
    env.add_member_overload(
        "lastIndexOf",
        "list_last_index_of",
        LIST_TYPE,
        vec![DYN_TYPE],
        list_last_index_of,
    )?;
    env.add_member_overload("find", "string_find", s(), vec![s()], find)?;
    env.add_member_overload("findAll", "string_find_all", s(), vec![s()], find_all)?;
    env.add_member_overload(
        "findAll",
        "string_find_all_n",
        s(),
        vec![s(), INT_TYPE],
        find_all,
    )?;
    env.add_overload(
        "sets.contains",
        "sets_contains",
        vec![LIST_TYPE, LIST_TYPE],
        sets_contains,
    )?;
    env.add_overload(
        "sets.equivalent",
        "sets_equivalent",
        vec![LIST_TYPE, LIST_TYPE],
        sets_equivalent,
    )?;
    env.add_overload(
        "sets.intersects",
        "sets_intersects",
        vec![LIST_TYPE, LIST_TYPE],
        sets_intersects,
    )?;
    Ok(env)
}

type Args<'b, 'v> = Vec<CowVal<'b, 'v>>;
type Out<'b, 'v> = Result<CowVal<'b, 'v>, ExecutionError>;

fn err(function: &str, message: impl ToString) -> ExecutionError {
    ExecutionError::function_error(function, message)
}

fn nth<'a, 'v>(args: &'a [CowVal<'_, 'v>], i: usize) -> Result<&'a (dyn Val + 'v), ExecutionError> {
    args.get(i)
        .map(|a| a.as_ref())
        .ok_or_else(|| ExecutionError::invalid_argument_count(i + 1, args.len()))
}

fn string_arg<'a>(function: &str, v: &'a dyn Val) -> Result<&'a str, ExecutionError> {
    v.downcast_ref::<CelString<'_>>()
        .map(|s| s.inner())
        .ok_or_else(|| {
            err(
                function,
                format!("expected a string, got {}", v.get_type().name()),
            )
        })
}

fn int_arg(function: &str, v: &dyn Val) -> Result<i64, ExecutionError> {
    v.downcast_ref::<CelInt>()
        .map(|i| *i.inner())
        .ok_or_else(|| {
            err(
                function,
                format!("expected an int, got {}", v.get_type().name()),
            )
        })
}

fn items<'b, 'v>(
    function: &str,
    v: &'b (dyn Val + 'v),
) -> Result<Vec<&'b (dyn Val + 'v)>, ExecutionError> {
    let iterable = v.as_iterable().ok_or_else(|| {
        err(
            function,
            format!("expected a list, got {}", v.get_type().name()),
        )
    })?;
    let mut it = iterable.iter();
    let mut out = Vec::new();
    while let Some(x) = it.next() {
        out.push(x);
    }
    Ok(out)
}

fn compare(function: &str, a: &dyn Val, b: &dyn Val) -> Result<Ordering, ExecutionError> {
    a.as_comparer()
        .ok_or_else(|| {
            err(
                function,
                format!("{} values cannot be ordered", a.get_type().name()),
            )
        })?
        .compare(b)
}

/// `string.replace`, charging for the result before building it: replacing
/// `""` in a long string with a long string would otherwise allocate their
/// product.
fn replace<'b, 'v>(args: Args<'b, 'v>) -> Out<'b, 'v> {
    const F: &str = "replace";
    let (this, from, to) = match args.as_slice() {
        [a, b, c] | [a, b, c, _] => (
            string_arg(F, a.as_ref())?,
            string_arg(F, b.as_ref())?,
            string_arg(F, c.as_ref())?,
        ),
        _ => return Err(ExecutionError::invalid_argument_count(3, args.len())),
    };
    let limit = match args.get(3) {
        Some(n) => int_arg(F, n.as_ref())?,
        None => -1,
    };
    let found = if from.is_empty() {
        this.chars().count() + 1
    } else {
        this.matches(from).count()
    };
    let count = if limit < 0 {
        found
    } else {
        found.min(limit as usize)
    };
    let grown = count.saturating_mul(to.len());
    budget::charge(1 + (this.len().saturating_add(grown) / 8) as u64)?;
    let out = if limit < 0 {
        this.replace(from, to)
    } else {
        this.replacen(from, to, count)
    };
    Ok(CowVal::owned(CelString::from(out)))
}

fn is_sorted<'b, 'v>(args: Args<'b, 'v>) -> Out<'b, 'v> {
    let list = items("isSorted", nth(&args, 0)?)?;
    for pair in list.windows(2) {
        if compare("isSorted", pair[0], pair[1])? == Ordering::Greater {
            return Ok(CowVal::owned(CelBool::from(false)));
        }
    }
    Ok(CowVal::owned(CelBool::from(true)))
}

fn sum<'b, 'v>(args: Args<'b, 'v>) -> Out<'b, 'v> {
    const F: &str = "sum";
    let list = items(F, nth(&args, 0)?)?;
    let Some(first) = list.first() else {
        return Ok(CowVal::owned(CelInt::from(0)));
    };
    if first.downcast_ref::<CelInt>().is_some() {
        let mut total: i64 = 0;
        for x in &list {
            total = total
                .checked_add(int_arg(F, *x)?)
                .ok_or_else(|| err(F, "integer overflow"))?;
        }
        Ok(CowVal::owned(CelInt::from(total)))
    } else if first.downcast_ref::<CelUInt>().is_some() {
        let mut total: u64 = 0;
        for x in &list {
            let v = x
                .downcast_ref::<CelUInt>()
                .ok_or_else(|| err(F, "mixed element types"))?;
            total = total
                .checked_add(*v.inner())
                .ok_or_else(|| err(F, "integer overflow"))?;
        }
        Ok(CowVal::owned(CelUInt::from(total)))
    } else {
        let mut total = 0.0;
        for x in &list {
            let v = x
                .downcast_ref::<CelDouble>()
                .ok_or_else(|| err(F, "expected numbers"))?;
            total += *v.inner();
        }
        Ok(CowVal::owned(CelDouble::from(total)))
    }
}

fn extreme<'b, 'v>(function: &str, args: Args<'b, 'v>, keep: Ordering) -> Out<'b, 'v> {
    let list = items(function, nth(&args, 0)?)?;
    let Some(mut best) = list.first().copied() else {
        return Err(err(function, "the list is empty"));
    };
    for x in &list[1..] {
        if compare(function, *x, best)? == keep {
            best = *x;
        }
    }
    Ok(CowVal::Owned(best.clone_as_boxed()))
}

fn min<'b, 'v>(args: Args<'b, 'v>) -> Out<'b, 'v> {
    extreme("min", args, Ordering::Less)
}

fn max<'b, 'v>(args: Args<'b, 'v>) -> Out<'b, 'v> {
    extreme("max", args, Ordering::Greater)
}

fn list_index_of<'b, 'v>(args: Args<'b, 'v>) -> Out<'b, 'v> {
    let (list, needle) = (items("indexOf", nth(&args, 0)?)?, nth(&args, 1)?);
    let i = list.iter().position(|x| x.equals(needle));
    Ok(CowVal::owned(CelInt::from(i.map_or(-1, |i| i as i64))))
}

fn list_last_index_of<'b, 'v>(args: Args<'b, 'v>) -> Out<'b, 'v> {
    let (list, needle) = (items("lastIndexOf", nth(&args, 0)?)?, nth(&args, 1)?);
    let i = list.iter().rposition(|x| x.equals(needle));
    Ok(CowVal::owned(CelInt::from(i.map_or(-1, |i| i as i64))))
}

/// Most compiled patterns kept per thread; past that the cache starts
/// over, so patterns computed at run time cannot grow it without bound.
const REGEX_CACHE: usize = 64;

thread_local! {
    /// Compiled patterns, for `find`/`findAll` (bounded program size) and
    /// for `matches` (`cel`'s settings). Used in place, never cloned: a
    /// clone of a `Regex` starts with an empty search cache, which cost
    /// more than the match itself (callgrind).
    static BOUNDED: RefCell<HashMap<String, regex::Regex>> = RefCell::new(HashMap::new());
    static PLAIN: RefCell<HashMap<String, regex::Regex>> = RefCell::new(HashMap::new());
}

/// Runs `f` on `build(pattern)`, compiled once per thread. Errors are not
/// cached: an invalid pattern fails the same way each time.
fn with_regex<R, E>(
    cache: &'static std::thread::LocalKey<RefCell<HashMap<String, regex::Regex>>>,
    pattern: &str,
    build: impl FnOnce(&str) -> Result<regex::Regex, E>,
    f: impl FnOnce(&regex::Regex) -> R,
) -> Result<R, E> {
    cache.with(|c| {
        if let Some(re) = c.borrow().get(pattern) {
            return Ok(f(re));
        }
        let re = build(pattern)?;
        let out = f(&re);
        let mut c = c.borrow_mut();
        if c.len() >= REGEX_CACHE {
            c.clear();
        }
        c.insert(pattern.to_string(), re);
        Ok(out)
    })
}

/// The patterns of `find` and `findAll`, with a bounded program size.
fn with_bounded_regex<R>(
    function: &str,
    pattern: &str,
    f: impl FnOnce(&regex::Regex) -> R,
) -> Result<R, ExecutionError> {
    with_regex(
        &BOUNDED,
        pattern,
        |p| regex::RegexBuilder::new(p).size_limit(1 << 20).build(),
        f,
    )
    .map_err(|e| err(function, e))
}

/// `matches`, as `cel`'s (the same regex settings and error message),
/// with the compiled pattern cached.
fn matches<'b, 'v>(args: Args<'b, 'v>) -> Out<'b, 'v> {
    const F: &str = "matches";
    let this = string_arg(F, nth(&args, 0)?)?;
    let pattern = string_arg(F, nth(&args, 1)?)?;
    let found = with_regex(&PLAIN, pattern, regex::Regex::new, |re| re.is_match(this))
        .map_err(|e| err(F, format!("'{pattern}' not a valid regex:\n{e}")))?;
    Ok(CowVal::owned(CelBool::from(found)))
}

fn find<'b, 'v>(args: Args<'b, 'v>) -> Out<'b, 'v> {
    let this = string_arg("find", nth(&args, 0)?)?;
    let pattern = string_arg("find", nth(&args, 1)?)?;
    let found = with_bounded_regex("find", pattern, |re| {
        re.find(this).map_or("", |m| m.as_str()).to_string()
    })?;
    Ok(CowVal::owned(CelString::from(found)))
}

fn find_all<'b, 'v>(args: Args<'b, 'v>) -> Out<'b, 'v> {
    let this = string_arg("findAll", nth(&args, 0)?)?;
    let pattern = string_arg("findAll", nth(&args, 1)?)?;
    let limit = match args.get(2) {
        Some(n) => int_arg("findAll", n.as_ref())?,
        None => -1,
    };
    let take = if limit < 0 {
        usize::MAX
    } else {
        limit as usize
    };
    let found: Vec<Box<dyn Val + 'v>> = with_bounded_regex("findAll", pattern, |re| {
        re.find_iter(this)
            .take(take)
            .map(|m| Box::new(CelString::from(m.as_str().to_string())) as Box<dyn Val + 'v>)
            .collect()
    })?;
    Ok(CowVal::owned(CelList::from(found)))
}

fn contains_all(function: &str, a: &dyn Val, b: &dyn Val) -> Result<bool, ExecutionError> {
    let (xs, ys) = (items(function, a)?, items(function, b)?);
    budget::charge((xs.len() as u64).saturating_mul(ys.len() as u64))?;
    Ok(ys.iter().all(|y| xs.iter().any(|x| x.equals(*y))))
}

fn sets_contains<'b, 'v>(args: Args<'b, 'v>) -> Out<'b, 'v> {
    let r = contains_all("sets.contains", nth(&args, 0)?, nth(&args, 1)?)?;
    Ok(CowVal::owned(CelBool::from(r)))
}

fn sets_equivalent<'b, 'v>(args: Args<'b, 'v>) -> Out<'b, 'v> {
    let (a, b) = (nth(&args, 0)?, nth(&args, 1)?);
    let r = contains_all("sets.equivalent", a, b)? && contains_all("sets.equivalent", b, a)?;
    Ok(CowVal::owned(CelBool::from(r)))
}

fn sets_intersects<'b, 'v>(args: Args<'b, 'v>) -> Out<'b, 'v> {
    const F: &str = "sets.intersects";
    let (xs, ys) = (items(F, nth(&args, 0)?)?, items(F, nth(&args, 1)?)?);
    budget::charge((xs.len() as u64).saturating_mul(ys.len() as u64))?;
    let r = ys.iter().any(|y| xs.iter().any(|x| x.equals(*y)));
    Ok(CowVal::owned(CelBool::from(r)))
}
