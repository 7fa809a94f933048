//! Programs and objects generated from bytes, for the differential test of
//! the compiled path against the interpreter: the `cel_differential` fuzz
//! target feeds it fuzzer input, and a unit test feeds it pseudo-random
//! bytes. The grammar is the one the compiled path covers (see
//! [`super::compiled`]) plus a few shapes it hands over, over objects that
//! mix every JSON type, so errors, absorption and numeric comparisons are
//! all exercised.

use serde_json::{json, Map, Value};

/// Reads choices from bytes; past the end every choice is 0.
pub struct Choices<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Choices<'a> {
    /// Choices read from `data`.
    pub fn new(data: &'a [u8]) -> Self {
        Choices { data, pos: 0 }
    }

    fn byte(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }

    fn below(&mut self, n: usize) -> usize {
        self.byte() as usize % n
    }

    fn done(&self) -> bool {
        self.pos >= self.data.len()
    }
}

const KEYS: &[&str] = &["a", "b", "name", "tags", "items", "n"];

const STRINGS: &[&str] = &[
    "",
    "a",
    "ab",
    "b",
    "bucket-a",
    "ünï",
    "CREATE",
    "team",
    "10.0.0.0/16",
    "7",
    "+7",
    "a/b/",
];

fn scalar(c: &mut Choices<'_>) -> Value {
    match c.below(12) {
        0 => Value::Null,
        1 => json!(true),
        2 => json!(false),
        3 => json!(0),
        4 => json!(1),
        5 => json!(-1),
        6 => json!(2.0),
        7 => json!(0.5),
        8 => json!(u64::MAX),
        9 => json!(i64::MAX),
        _ => json!(STRINGS[c.below(STRINGS.len())]),
    }
}

fn value(c: &mut Choices<'_>, depth: usize) -> Value {
    if depth == 0 || c.done() {
        return scalar(c);
    }
    match c.below(4) {
        0 => Value::Array((0..c.below(4)).map(|_| value(c, depth - 1)).collect()),
        1 => object(c, depth - 1),
        _ => scalar(c),
    }
}

fn object(c: &mut Choices<'_>, depth: usize) -> Value {
    let mut m = Map::new();
    for _ in 0..c.below(5) {
        let k = KEYS[c.below(KEYS.len())];
        m.insert(k.to_string(), value(c, depth));
    }
    Value::Object(m)
}

/// An object for `self` (and, half the time, `oldSelf`).
pub fn objects(c: &mut Choices<'_>) -> (Value, Option<Value>) {
    let this = json!({"metadata": {"name": STRINGS[c.below(STRINGS.len())]}, "spec": object(c, 3)});
    let old = (c.below(2) == 0).then(|| json!({"spec": object(c, 2)}));
    (this, old)
}

struct Gen<'c, 'a> {
    c: &'c mut Choices<'a>,
    /// Comprehension variables in scope.
    locals: Vec<String>,
    nesting: usize,
}

impl Gen<'_, '_> {
    fn path(&mut self) -> String {
        let mut p = match (self.locals.is_empty(), self.c.below(6)) {
            (false, 0 | 1) => self.locals[self.c.below(self.locals.len())].clone(),
            (_, 2) => "oldSelf.spec".to_string(),
            (_, 3) => "self".to_string(),
            _ => "self.spec".to_string(),
        };
        for _ in 0..self.c.below(3) {
            match self.c.below(6) {
                0 => p.push_str(&format!("[{}]", self.c.below(3))),
                1 => p.push_str(&format!("['{}']", KEYS[self.c.below(KEYS.len())])),
                _ => {
                    p.push('.');
                    p.push_str(KEYS[self.c.below(KEYS.len())]);
                }
            }
        }
        p
    }

    fn literal(&mut self) -> String {
        match self.c.below(10) {
            0 => "null".into(),
            1 => "true".into(),
            2 => "1".into(),
            3 => "1u".into(),
            4 => "0.5".into(),
            5 => "-1".into(),
            6 => "2.0".into(),
            7 => "18446744073709551615u".into(),
            _ => format!("'{}'", STRINGS[self.c.below(STRINGS.len())]),
        }
    }

    fn value(&mut self, depth: usize) -> String {
        if depth == 0 {
            return match self.c.below(2) {
                0 => self.literal(),
                _ => self.path(),
            };
        }
        match self.c.below(10) {
            0..=2 => self.path(),
            3 | 4 => self.literal(),
            5 => match self.c.below(3) {
                0 => format!("size({})", self.value(depth - 1)),
                1 => format!("int({})", self.value(depth - 1)),
                _ => format!(
                    "{}.split('{}')",
                    self.value(depth - 1),
                    ["/", "-", "b"][self.c.below(3)]
                ),
            },
            6 => format!("{}.size()", self.path()),
            7 => {
                let items: Vec<String> = (0..self.c.below(4)).map(|_| self.literal()).collect();
                format!("[{}]", items.join(", "))
            }
            8 => match self.c.below(6) {
                0 => "request.operation".into(),
                1 => "request.namespace".into(),
                2 => "request.name".into(),
                3 => "request.userInfo.username".into(),
                4 => "request.userInfo.groups".into(),
                _ => "request.dryRun".into(),
            },
            _ => format!(
                "({} ? {} : {})",
                self.boolean(depth - 1),
                self.value(depth - 1),
                self.value(depth - 1)
            ),
        }
    }

    fn boolean(&mut self, depth: usize) -> String {
        if depth == 0 {
            return match self.c.below(3) {
                0 => "true".into(),
                1 => "false".into(),
                _ => format!("has({}.{})", self.path(), KEYS[self.c.below(KEYS.len())]),
            };
        }
        let d = depth - 1;
        match self.c.below(16) {
            0 => format!("({} && {})", self.boolean(d), self.boolean(d)),
            1 => format!("({} || {})", self.boolean(d), self.boolean(d)),
            2 => format!("!{}", self.boolean(d)),
            3 => format!(
                "({} ? {} : {})",
                self.boolean(d),
                self.boolean(d),
                self.boolean(d)
            ),
            4 | 5 => {
                let op = ["==", "!=", "<", "<=", ">", ">="][self.c.below(6)];
                format!("({} {op} {})", self.value(d), self.value(d))
            }
            6 => format!("({} in {})", self.value(d), self.value(d)),
            7 => format!("has({}.{})", self.path(), KEYS[self.c.below(KEYS.len())]),
            8 => {
                let f = ["startsWith", "endsWith", "contains"][self.c.below(3)];
                format!("{}.{f}({})", self.value(d), self.value(d))
            }
            9 => {
                let re = ["^a", "b$", "[0-9]+", "^$", "ü"][self.c.below(5)];
                format!("{}.matches('{re}')", self.value(d))
            }
            10 | 11 if self.nesting < 2 => {
                let var = ["x", "y"][self.nesting].to_string();
                let range = self.value(d);
                let f = ["all", "exists"][self.c.below(2)];
                self.nesting += 1;
                self.locals.push(var.clone());
                let body = self.boolean(d);
                self.locals.pop();
                self.nesting -= 1;
                format!("{range}.{f}({var}, {body})")
            }
            // Shapes the compiled path hands over, mixed in.
            12 => format!("({} + 1 > 0)", self.value(d)),
            13 => format!("type({}) == int", self.value(d)),
            14 => self.value(d),
            _ => format!("has({}.{})", self.path(), KEYS[self.c.below(KEYS.len())]),
        }
    }
}

/// A rule expression (usually a bool, sometimes not).
pub fn expression(c: &mut Choices<'_>) -> String {
    let depth = 1 + c.below(4);
    Gen {
        c,
        locals: Vec::new(),
        nesting: 0,
    }
    .boolean(depth)
}

/// A request with a generated operation, user, groups and dry-run flag.
pub fn request(c: &mut Choices<'_>, object: &Value) -> crate::admission::review::Request {
    use crate::admission::model::Operation;
    let op = [
        Operation::Create,
        Operation::Update,
        Operation::Delete,
        Operation::Connect,
    ][c.below(4)];
    let mut b = crate::admission::review::RequestBuilder::new(op).object(object.clone());
    if c.below(2) == 0 {
        b = b.username(STRINGS[c.below(STRINGS.len())]);
    }
    if c.below(2) == 0 {
        let groups = (0..c.below(3))
            .map(|_| STRINGS[c.below(STRINGS.len())].to_string())
            .collect();
        b = b.groups(groups);
    }
    b.dry_run(c.below(2) == 0).build()
}

/// One differential case from `data`: an expression, objects and a
/// request, evaluated both ways ([`super::differential`]). `Err` describes a
/// disagreement, with the object.
pub fn run(data: &[u8]) -> Result<super::Agreement, String> {
    let mut c = Choices::new(data);
    let source = expression(&mut c);
    let (this, old) = objects(&mut c);
    let req = request(&mut c, &this);
    let inputs = super::Inputs {
        request: &req,
        object: &this,
        old: old.as_ref(),
    };
    super::differential(&source, inputs)
        .map_err(|e| format!("{e}\n  self = {this}\n  oldSelf = {old:?}"))
}
