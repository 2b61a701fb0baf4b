//! The image map: which local executable a container `image` stands for, with the entry
//! point and default arguments an image would carry (`ENTRYPOINT`, `CMD`), and kube's
//! rules for `command`/`args` with `$(VAR)` expansion.
//!
//! A map file (`--images FILE`) is YAML, patterns to entries, the first match winning, the
//! file's before the built-in ones:
//!
//! ```yaml
//! "redis:*": /usr/bin/redis-server          # the entry point; no default arguments
//! "example.com/tools/*":
//!   entrypoint: [/usr/local/bin/tool]
//!   cmd: [--serve]
//! "controller:latest":                     # a kubebuilder project's image
//!   files: {/manager: /home/me/project/bin/manager}
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

/// What an image runs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// The image's entry point (replaced by a container's `command`).
    #[serde(default)]
    pub entrypoint: Vec<String>,
    /// Its default arguments (replaced by `args`).
    #[serde(default)]
    pub cmd: Vec<String>,
    /// A program the command runs under when it is installed (`busybox` runs its applets:
    /// `sh -c …` becomes `busybox sh -c …`).
    #[serde(default)]
    pub wrapper: Option<String>,
    /// The program that arguments starting with `-` (or naming a `.conf` file) are given to,
    /// as an image's entry point script does (redis's `docker-entrypoint.sh` turns
    /// `args: [--port, "7000"]` into `redis-server --port 7000`).
    #[serde(default)]
    pub options_for: Option<String>,
    /// Programs that talk to the image's server, with the arguments that point them at the
    /// pod's address: inside a pod `127.0.0.1` is the machine's (pods share its network, each
    /// at an address of its own), so `redis-cli ping`, run by `kubectl exec`, a probe, a hook
    /// or as the command, becomes `redis-cli -h $(POD_IP) ping` — unless its arguments name
    /// the option (`-h`) already.
    #[serde(default)]
    pub clients: BTreeMap<String, Vec<String>>,
    /// The image's own directories (its data and run directories): each container gets
    /// empty ones of its own there, as the image's filesystem would give it, under any
    /// volume mounted over them.
    #[serde(default)]
    pub dirs: Vec<String>,
    /// The image's own files: a path inside the container → the machine's file shown there
    /// (read-only), as the image's filesystem holds them — a Go operator's `/manager`, which
    /// its Deployment's `command` names. Where containers are not isolated, a command naming
    /// one runs the machine's file.
    #[serde(default)]
    pub files: BTreeMap<String, String>,
    /// The image's working directory (`WORKDIR`), where a container without `workingDir`
    /// starts.
    #[serde(default)]
    pub workdir: Option<String>,
    /// Programs of the image run as others of the machine's: a name (a path's file name
    /// counts) → the machine's program (the e2e busybox image's `sh` as `bash`, which passes
    /// on variables whose names are not shell names, as that image's shell does and this
    /// machine's busybox does not).
    #[serde(default)]
    pub programs: BTreeMap<String, String>,
}

/// An image's clients (program name → arguments), expanded for one container.
pub type Clients = Vec<(String, Vec<String>)>;

impl Entry {
    /// The image's clients with their arguments expanded by `lookup`.
    pub fn clients(&self, lookup: &dyn Fn(&str) -> Option<String>) -> Clients {
        self.clients
            .iter()
            .map(|(program, args)| {
                let args = args.iter().map(|a| expand(a, lookup)).collect();
                (program.clone(), args)
            })
            .collect()
    }
}

/// `command` with its client's arguments (see [`Entry::clients`]) after the program's name
/// when it runs one of `clients` and does not name their options itself.
pub fn pointed(command: &[String], clients: &[(String, Vec<String>)]) -> Vec<String> {
    let Some((program, rest)) = command.split_first() else {
        return Vec::new();
    };
    let name = Path::new(program)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or(program);
    let Some((_, extra)) = clients.iter().find(|(client, _)| client == name) else {
        return command.to_vec();
    };
    let named = extra
        .iter()
        .filter(|a| a.starts_with('-'))
        .any(|option| rest.iter().any(|a| a == option));
    if named {
        return command.to_vec();
    }
    let mut out = vec![program.clone()];
    out.extend(extra.iter().cloned());
    out.extend(rest.iter().cloned());
    out
}

#[derive(Deserialize)]
#[serde(untagged)]
enum FileEntry {
    Path(String),
    Entry(Entry),
}

/// Patterns (`*` matches any run of characters) and their entries, in order: the file's,
/// then the built-in ones of the node's network (see [`builtin`]).
#[derive(Clone, Debug)]
pub struct ImageMap {
    entries: Vec<(String, Entry)>,
    shared: Vec<(String, Entry)>,
    private: Vec<(String, Entry)>,
}

impl Default for ImageMap {
    fn default() -> Self {
        Self {
            entries: Vec::new(),
            shared: builtin(false),
            private: builtin(true),
        }
    }
}

/// Whether `program` is on `PATH` (or in `/usr/sbin`, where Debian puts servers).
fn installed(program: &str) -> bool {
    let path = std::env::var("PATH").unwrap_or_default();
    path.split(':')
        .chain(["/usr/sbin", "/usr/local/sbin"])
        .any(|dir| Path::new(dir).join(program).is_file())
}

/// The built-in map. Where pods share the machine's network (`private` false), `redis` runs
/// `redis-server` bound to the pod's address (and points `redis-cli` at it); where each pod
/// has a network of its own, it runs as the image does (every address, protected mode off,
/// `redis-cli` reaching it on `localhost`), and servers a Debian package installed run as
/// their images: `python` (`python3`), `memcached` (port 11211), `postgres` (see
/// [`POSTGRES_ENTRYPOINT`], port 5432), `nginx` (see [`NGINX_ENTRYPOINT`], port 80).
/// `busybox` runs `busybox`
/// applets (or the machine's own commands when busybox is not installed).
fn builtin(private: bool) -> Vec<(String, Entry)> {
    let entry = |entrypoint: &[&str], cmd: &[&str], wrapper: Option<&str>| Entry {
        entrypoint: entrypoint.iter().map(|s| (*s).to_owned()).collect(),
        cmd: cmd.iter().map(|s| (*s).to_owned()).collect(),
        wrapper: wrapper.map(str::to_owned),
        options_for: None,
        clients: BTreeMap::new(),
        dirs: Vec::new(),
        files: BTreeMap::new(),
        workdir: None,
        programs: BTreeMap::new(),
    };
    let redis = if private {
        Entry {
            options_for: Some("redis-server".into()),
            ..entry(&[], &["redis-server", "--protected-mode", "no"], None)
        }
    } else {
        Entry {
            options_for: Some("redis-server".into()),
            clients: BTreeMap::from([("redis-cli".into(), vec!["-h".into(), "$(POD_IP)".into()])]),
            ..entry(&[], &["redis-server", "--bind", "$(POD_IP)"], None)
        }
    };
    let mut out = Vec::new();
    let mut add = |name: &str, entry: Entry| {
        out.push((name.to_owned(), entry.clone()));
        out.push((format!("{name}:*"), entry));
    };
    add("redis", redis);
    add("busybox", entry(&[], &["sh"], Some("busybox")));
    if private {
        if installed("python3") {
            add("python", entry(&[], &["python3"], None));
        }
        if installed("memcached") {
            add(
                "memcached",
                Entry {
                    options_for: Some("memcached".into()),
                    ..entry(&[], &["memcached", "-u", "nobody"], None)
                },
            );
        }
        if postgres_installed() {
            add(
                "postgres",
                Entry {
                    dirs: vec![
                        "/var/lib/postgresql/data".into(),
                        "/var/run/postgresql".into(),
                    ],
                    ..entry(
                        &["sh", "-c", POSTGRES_ENTRYPOINT, "docker-entrypoint.sh"],
                        &["postgres"],
                        None,
                    )
                },
            );
        }
        if installed("nginx") {
            add(
                "nginx",
                Entry {
                    dirs: [
                        "/etc/nginx/conf.d",
                        "/var/cache/nginx",
                        "/var/lib/nginx",
                        "/var/log/nginx",
                    ]
                    .map(str::to_owned)
                    .to_vec(),
                    ..entry(
                        &["sh", "-c", NGINX_ENTRYPOINT, "docker-entrypoint.sh"],
                        &["nginx", "-g", "daemon off;"],
                        None,
                    )
                },
            );
        }
    }
    out
}

/// Whether a Debian PostgreSQL server is installed (`/usr/lib/postgresql/<version>/bin`).
fn postgres_installed() -> bool {
    std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .any(|v| v.path().join("bin/postgres").is_file())
}

/// The `postgres` image's entry point, as its `docker-entrypoint.sh` behaves: options alone
/// go to `postgres`; an empty `$PGDATA` (`/var/lib/postgresql/data`) is initialised first
/// with `POSTGRES_USER` (`postgres`) and `POSTGRES_PASSWORD` (required unless
/// `POSTGRES_HOST_AUTH_METHOD=trust`), `POSTGRES_DB` created, `POSTGRES_INITDB_ARGS` passed
/// on; every address may connect with a password (`scram-sha-256`); the server runs as the
/// `postgres` user on every address, its socket in `/var/run/postgresql` (the container's own).
pub const POSTGRES_ENTRYPOINT: &str = r#"set -e
bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
case "$1" in -*) set -- postgres "$@" ;; esac
if [ "$1" != postgres ]; then exec "$@"; fi
shift
export PGDATA="${PGDATA:-/var/lib/postgresql/data}"
as=""
if [ "$(id -u)" = 0 ]; then
  mkdir -p "$PGDATA" /var/run/postgresql
  chown postgres "$PGDATA" /var/run/postgresql
  as="runuser -u postgres --"
fi
chmod 700 "$PGDATA"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  auth="${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}"
  if [ -z "$POSTGRES_PASSWORD" ] && [ "$auth" != trust ]; then
    echo "Error: Database is uninitialized and superuser password is not specified." >&2
    echo "       You must specify POSTGRES_PASSWORD to a non-empty value for the superuser." >&2
    exit 1
  fi
  user="${POSTGRES_USER:-postgres}"
  pwfile=$(mktemp)
  printf '%s
' "$POSTGRES_PASSWORD" > "$pwfile"
  [ -n "$as" ] && chown postgres "$pwfile"
  $as "$bin/initdb" -D "$PGDATA" --username="$user" --pwfile="$pwfile" --auth-local=trust --auth-host="$auth" $POSTGRES_INITDB_ARGS
  rm -f "$pwfile"
  printf 'host all all all %s
' "$auth" >> "$PGDATA/pg_hba.conf"
  db="${POSTGRES_DB:-$user}"
  if [ "$db" != postgres ]; then
    echo "CREATE DATABASE "$db";" | $as "$bin/postgres" --single -D "$PGDATA" -j postgres >/dev/null
  fi
fi
exec $as "$bin/postgres" -D "$PGDATA" -c listen_addresses='*' -c unix_socket_directories=/var/run/postgresql "$@"
"#;

/// The `nginx` image's entry point on Debian's nginx, as the image behaves: `nginx` (or
/// `nginx-debug`) runs with the image's configuration — every request logged to the
/// container's output, errors to its error output, `include /etc/nginx/conf.d/*.conf` — unless
/// the pod mounts its own `/etc/nginx/nginx.conf` or the command names one (`-c`); an empty
/// `/etc/nginx/conf.d` (the container's own unless a volume is mounted there) gets the
/// image's `default.conf` (port 80, `/usr/share/nginx/html`, on IPv6 too where the pod has
/// it), or the pod's `/etc/nginx/templates/*.template` with the environment substituted
/// (`envsubst`, as the image's `20-envsubst-on-templates.sh`). Other commands run as they are.
/// The process ID file is the container's own (`/var/cache/nginx`, or `/tmp` for a user who
/// cannot write there).
pub const NGINX_ENTRYPOINT: &str = r#"set -e
case "$1" in nginx|nginx-debug) shift ;; *) exec "$@" ;; esac
run=/var/cache/nginx
[ -w "$run" ] || run=/tmp
conf=/etc/nginx/nginx.conf
if ! findmnt -n -M "$conf" >/dev/null 2>&1; then
  conf="$run/nginx.conf"
  cat > "$conf" <<EOF
user www-data;
worker_processes auto;
error_log stderr notice;
pid $run/nginx.pid;
include /etc/nginx/modules-enabled/*.conf;
events {
    worker_connections 1024;
}
http {
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    log_format main '\$remote_addr - \$remote_user [\$time_local] "\$request" '
                    '\$status \$body_bytes_sent "\$http_referer" '
                    '"\$http_user_agent" "\$http_x_forwarded_for"';
    access_log /dev/stdout main;
    sendfile on;
    keepalive_timeout 65;
    include /etc/nginx/conf.d/*.conf;
}
EOF
fi
d=/etc/nginx/conf.d
if [ -w "$d" ] && [ -z "$(ls -A "$d")" ]; then
  if [ -d /etc/nginx/templates ] && command -v envsubst >/dev/null; then
    names=$(env | sed -n 's/^\([A-Za-z_][A-Za-z0-9_]*\)=.*/${\1}/p' | tr '\n' ' ')
    for t in /etc/nginx/templates/*.template; do
      [ -f "$t" ] || continue
      envsubst "$names" < "$t" > "$d/$(basename "$t" .template)"
    done
  else
    ipv6=""
    [ -f /proc/net/if_inet6 ] && ipv6="listen [::]:80;"
    cat > "$d/default.conf" <<EOF
server {
    listen 80;
    $ipv6
    server_name localhost;
    location / {
        root /usr/share/nginx/html;
        index index.html index.htm;
    }
    error_page 500 502 503 504 /50x.html;
    location = /50x.html {
        root /usr/share/nginx/html;
    }
}
EOF
  fi
fi
for a; do
  [ "$a" = -c ] && exec nginx "$@"
done
exec nginx -c "$conf" "$@"
"#;

/// Why a map file cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("image map {path}: {reason}")]
pub struct MapError {
    path: String,
    reason: String,
}

impl ImageMap {
    /// The built-in map after the entries of the YAML file at `path`.
    ///
    /// # Errors
    /// A file that cannot be read or is not a map of patterns to entries.
    pub fn load(path: &Path) -> Result<Self, MapError> {
        let error = |reason: String| MapError {
            path: path.display().to_string(),
            reason,
        };
        let text = std::fs::read_to_string(path).map_err(|e| error(e.to_string()))?;
        let file: BTreeMap<String, FileEntry> =
            serde_norway::from_str(&text).map_err(|e| error(e.to_string()))?;
        let mut entries: Vec<(String, Entry)> = file
            .into_iter()
            .map(|(pattern, entry)| {
                let entry = match entry {
                    FileEntry::Path(path) => Entry {
                        entrypoint: vec![path],
                        ..Entry::default()
                    },
                    FileEntry::Entry(entry) => entry,
                };
                (pattern, entry)
            })
            .collect();
        // More specific (longer) patterns first among the file's.
        entries.sort_by_key(|(p, _)| std::cmp::Reverse(p.replace('*', "").len()));
        Ok(Self {
            entries,
            ..Self::default()
        })
    }

    /// The entry for `image` on a node whose pods share the machine's network, if the map
    /// has one.
    pub fn lookup(&self, image: &str) -> Option<&Entry> {
        self.lookup_in(image, false)
    }

    /// The entry for `image` on a node whose pods have networks of their own (`private`) or
    /// not, if the map has one.
    pub fn lookup_in(&self, image: &str, private: bool) -> Option<&Entry> {
        let image = normalize(image);
        let builtin = if private { &self.private } else { &self.shared };
        self.entries
            .iter()
            .chain(builtin)
            .find(|(pattern, _)| glob(&normalize(pattern), &image))
            .map(|(_, e)| e)
    }
}

/// `docker.io/library/redis:7` → `redis:7`.
fn normalize(image: &str) -> String {
    let image = image.trim();
    let image = image.strip_prefix("docker.io/").unwrap_or(image);
    let image = image.strip_prefix("library/").unwrap_or(image);
    image.to_owned()
}

/// Whether `text` matches `pattern`, `*` matching any run of characters.
fn glob(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let mut rest = text;
    for (i, part) in parts.iter().enumerate() {
        if i == 0 {
            let Some(r) = rest.strip_prefix(part) else {
                return false;
            };
            rest = r;
        } else if i == parts.len() - 1 {
            return rest.ends_with(part);
        } else {
            match rest.find(part) {
                Some(at) => rest = &rest[at + part.len()..],
                None => return false,
            }
        }
    }
    true
}

/// kube's `$(VAR)` expansion: a defined variable is replaced, an undefined one kept as
/// written, `$$` is a literal `$`.
pub fn expand(text: &str, lookup: &dyn Fn(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(text.len());
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'$' && i + 1 < bytes.len() {
            match bytes[i + 1] {
                b'$' => {
                    out.push('$');
                    i += 2;
                    continue;
                }
                b'(' => {
                    if let Some(end) = text[i + 2..].find(')') {
                        let name = &text[i + 2..i + 2 + end];
                        match lookup(name) {
                            Some(value) => out.push_str(&value),
                            None => out.push_str(&text[i..i + 3 + end]),
                        }
                        i += 3 + end;
                        continue;
                    }
                }
                _ => {}
            }
        }
        let ch = text[i..].chars().next().unwrap_or('$');
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

/// The argument vector of a container (kube's entry point rules): `command` replaces the
/// image's entry point and its default arguments; `args` replaces the default arguments.
/// Both are expanded with `lookup`.
pub fn argv(
    entry: &Entry,
    command: Option<&[String]>,
    args: Option<&[String]>,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Vec<String> {
    let expanded =
        |list: &[String]| -> Vec<String> { list.iter().map(|s| expand(s, lookup)).collect() };
    let mut argv = match (command.filter(|c| !c.is_empty()), args) {
        (Some(command), args) => {
            let mut v = expanded(command);
            v.extend(expanded(args.unwrap_or(&[])));
            v
        }
        (None, Some(args)) if !args.is_empty() => {
            let mut v = expanded(&entry.entrypoint);
            v.extend(expanded(args));
            v
        }
        (None, _) => {
            let mut v = expanded(&entry.entrypoint);
            v.extend(expanded(&entry.cmd));
            v
        }
    };
    if let Some(program) = &entry.options_for
        && argv
            .first()
            .is_some_and(|first| first.starts_with('-') || first.ends_with(".conf"))
    {
        argv.insert(0, program.clone());
    }
    let mut argv = pointed(&argv, &entry.clients(lookup));
    let replaced = argv
        .first()
        .and_then(|program| Path::new(program).file_name())
        .and_then(|name| name.to_str())
        .and_then(|name| entry.programs.get(name))
        .cloned();
    if let Some(program) = replaced {
        argv[0] = program;
        return argv;
    }
    if let Some(wrapper) = entry.wrapper.as_deref().and_then(which)
        && argv.first().is_some_and(|program| runs(&wrapper, program))
    {
        argv.insert(0, wrapper);
    }
    argv
}

/// A directory of links to each applet of the multi-call program `wrapper` (as a busybox
/// image's `/bin`), made under `base` the first time; `None` when it is not installed.
/// Containers starting together may ask at once: each makes its links in a directory of
/// its own and renames it into place, so none ever sees a half-made one.
pub fn applet_dir(wrapper: &str, base: &Path) -> Option<std::path::PathBuf> {
    static MADE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let program = which(wrapper)?;
    let wrapper = Path::new(wrapper).file_name()?.to_str()?;
    let parent = base.join("applets");
    let dir = parent.join(wrapper);
    if dir.join(".complete").exists() {
        return Some(dir);
    }
    let draft = parent.join(format!(
        ".{wrapper}.{}.{}",
        std::process::id(),
        MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let made = (|| {
        std::fs::create_dir_all(&draft).ok()?;
        let list = std::process::Command::new(&program)
            .arg("--list")
            .output()
            .ok()?;
        for applet in String::from_utf8_lossy(&list.stdout).lines() {
            let applet = applet.trim();
            if applet.is_empty() || applet.contains('/') || applet.starts_with('.') {
                continue;
            }
            std::os::unix::fs::symlink(&program, draft.join(applet)).ok()?;
        }
        std::fs::write(draft.join(".complete"), b"").ok()?;
        // An older, unfinished directory (an agent stopped while making it) gives way.
        if dir.exists() && !dir.join(".complete").exists() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        std::fs::rename(&draft, &dir).ok()
    })();
    if made.is_none() {
        let _ = std::fs::remove_dir_all(&draft);
    }
    dir.join(".complete").exists().then_some(dir)
}

/// Whether the multi-call program `wrapper` (busybox) has an applet named as `program`.
fn runs(wrapper: &str, program: &str) -> bool {
    let name = Path::new(program)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or(program);
    std::process::Command::new(wrapper)
        .arg("--list")
        .output()
        .is_ok_and(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .any(|l| l.trim() == name)
        })
}

/// The full path of `program` on `PATH`, if it is installed.
pub fn which(program: &str) -> Option<String> {
    if program.contains('/') {
        return Path::new(program).is_file().then(|| program.to_owned());
    }
    let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into());
    path.split(':')
        .map(|dir| Path::new(dir).join(program))
        .find(|p| p.is_file())
        .map(|p| p.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(name: &str) -> Option<String> {
        match name {
            "POD_IP" => Some("127.64.0.2".into()),
            "PORT" => Some("7000".into()),
            _ => None,
        }
    }

    #[test]
    fn expansion_follows_kube() {
        assert_eq!(
            expand("--bind $(POD_IP):$(PORT)", &vars),
            "--bind 127.64.0.2:7000"
        );
        assert_eq!(
            expand("$(UNDEFINED) $$(PORT) $x $", &vars),
            "$(UNDEFINED) $(PORT) $x $"
        );
        assert_eq!(expand("$(unterminated", &vars), "$(unterminated");
    }

    #[test]
    fn images_map_and_args_replace_defaults() {
        let map = ImageMap::default();
        assert!(map.lookup("docker.io/library/redis:7.2").is_some());
        assert!(map.lookup("redis").is_some());
        assert!(map.lookup("nginx:1.27").is_none());
        let redis = map.lookup("redis:7").cloned().unwrap_or_default();
        assert_eq!(
            argv(&redis, None, None, &vars),
            ["redis-server", "--bind", "127.64.0.2"]
        );
        let options = vec!["--port".to_owned(), "$(PORT)".into()];
        assert_eq!(
            argv(&redis, None, Some(&options), &vars),
            ["redis-server", "--port", "7000"],
            "options go to redis-server, as the image's entry point script gives them"
        );
        let args = vec!["redis-server".to_owned(), "--port".into(), "$(PORT)".into()];
        assert_eq!(
            argv(&redis, None, Some(&args), &vars),
            ["redis-server", "--port", "7000"]
        );
        let command = vec!["sleep".to_owned()];
        let args = vec!["5".to_owned()];
        assert_eq!(
            argv(&redis, Some(&command), Some(&args), &vars),
            ["sleep", "5"]
        );
        assert!(glob("a*c*e", "abcde") && !glob("a*c", "abd") && glob("*", ""));
    }

    #[test]
    fn with_networks_of_their_own_images_run_as_they_are() {
        let map = ImageMap::default();
        let redis = map.lookup_in("redis:7", true).cloned().unwrap_or_default();
        assert_eq!(
            argv(&redis, None, None, &vars),
            ["redis-server", "--protected-mode", "no"]
        );
        assert!(
            redis.clients(&vars).is_empty(),
            "redis-cli reaches localhost"
        );
        assert_eq!(
            map.lookup_in("python:3.12", true).map(|e| e.cmd.clone()),
            installed("python3").then(|| vec!["python3".to_owned()])
        );
        assert!(
            map.lookup("python:3.12").is_none(),
            "only with a network of its own"
        );
    }

    #[test]
    fn clients_are_pointed_at_the_pod() {
        let redis = ImageMap::default()
            .lookup("redis:7")
            .cloned()
            .unwrap_or_default();
        let clients = redis.clients(&vars);
        let words = |s: &str| s.split(' ').map(str::to_owned).collect::<Vec<_>>();
        assert_eq!(
            pointed(&words("redis-cli ping"), &clients),
            words("redis-cli -h 127.64.0.2 ping")
        );
        assert_eq!(
            pointed(&words("/usr/bin/redis-cli info replication"), &clients),
            words("/usr/bin/redis-cli -h 127.64.0.2 info replication")
        );
        for kept in [
            "redis-cli -h redis-0.redis ping",
            "sh -c redis-cli",
            "redis-server",
        ] {
            assert_eq!(pointed(&words(kept), &clients), words(kept), "{kept}");
        }
        let command = words("redis-cli");
        let args = words("-p 7000 ping");
        assert_eq!(
            argv(&redis, Some(&command), Some(&args), &vars),
            words("redis-cli -h 127.64.0.2 -p 7000 ping"),
            "a container whose command is the client is pointed too"
        );
        assert!(pointed(&[], &clients).is_empty());
    }

    #[test]
    fn a_map_file_comes_first() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("images.yaml");
        std::fs::write(
            &path,
            "\"redis:*\": /opt/redis/bin/redis-server\ntool:\n  entrypoint: [/bin/tool]\n  cmd: [--serve]\n\"controller:latest\":\n  files: {/manager: /work/bin/manager}\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let map = ImageMap::load(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            map.lookup("redis:6").map(|e| e.entrypoint.clone()),
            Some(vec!["/opt/redis/bin/redis-server".to_owned()])
        );
        assert_eq!(
            map.lookup("tool").map(|e| e.cmd.clone()),
            Some(vec!["--serve".to_owned()])
        );
        assert_eq!(
            map.lookup("controller:latest").map(|e| e.files.clone()),
            Some(BTreeMap::from([(
                "/manager".to_owned(),
                "/work/bin/manager".to_owned()
            )]))
        );
        std::fs::write(&path, "tool: {entry: 1}").unwrap_or_else(|e| panic!("{e}"));
        assert!(ImageMap::load(&path).is_err());
    }

    #[test]
    fn an_images_programs_run_as_the_machines_it_names() {
        let entry = Entry {
            cmd: vec!["sh".into()],
            wrapper: Some("busybox".into()),
            programs: BTreeMap::from([("sh".to_owned(), "/bin/bash".to_owned())]),
            ..Entry::default()
        };
        let none = |_: &str| None;
        let command = ["/bin/sh".to_owned(), "-c".to_owned(), "env".to_owned()];
        assert_eq!(
            argv(&entry, Some(&command), None, &none),
            ["/bin/bash", "-c", "env"]
        );
        assert_eq!(argv(&entry, None, None, &none), ["/bin/bash"]);
        let other = ["cat".to_owned()];
        assert_ne!(argv(&entry, Some(&other), None, &none)[0], "/bin/bash");
    }

    #[test]
    fn containers_starting_together_all_find_the_applets() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let wrapper = dir.path().join("multicall");
        std::fs::write(&wrapper, "#!/bin/sh\nprintf 'sh\\nls\\nnslookup\\n'\n")
            .unwrap_or_else(|e| panic!("{e}"));
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755))
            .unwrap_or_else(|e| panic!("{e}"));
        let wrapper = wrapper.display().to_string();
        let base = dir.path().join("data");
        let found: Vec<Option<std::path::PathBuf>> = std::thread::scope(|s| {
            let asks: Vec<_> = (0..8)
                .map(|_| s.spawn(|| applet_dir(&wrapper, &base)))
                .collect();
            asks.into_iter()
                .map(|a| a.join().unwrap_or_else(|_| panic!("an asker panicked")))
                .collect()
        });
        for got in &found {
            let got = got
                .as_ref()
                .unwrap_or_else(|| panic!("no applets: {found:?}"));
            for applet in ["sh", "ls", "nslookup"] {
                assert!(got.join(applet).exists(), "{applet} missing in {got:?}");
            }
        }
        // Nothing half-made is left beside the directory.
        let left: Vec<_> = std::fs::read_dir(base.join("applets"))
            .unwrap_or_else(|e| panic!("{e}"))
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(left, vec![std::ffi::OsString::from("multicall")]);
    }
}
