package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// procs tracks every process the bench starts, by PID, so each is stopped
// on every exit path, interrupts included.
type procs struct {
	mu   sync.Mutex
	list []*exec.Cmd
}

func (p *procs) start(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its own group: children die with it
	if err := cmd.Start(); err != nil {
		return err
	}
	p.mu.Lock()
	p.list = append(p.list, cmd)
	p.mu.Unlock()
	return nil
}

// stop sends SIGTERM to each process group, waits a little, then SIGKILLs.
func (p *procs) stop() {
	p.mu.Lock()
	list := p.list
	p.list = nil
	p.mu.Unlock()
	for _, c := range list {
		_ = syscall.Kill(-c.Process.Pid, syscall.SIGTERM)
	}
	for _, c := range list {
		done := make(chan struct{})
		go func() { _ = c.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
			<-done
		}
	}
}

// portFree reports an error if something listens on addr already.
func portFree(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%s is in use (%v): stop what runs there, or pick other ports with -port", addr, err)
	}
	return ln.Close()
}

func waitHTTP(ctx context.Context, url string) error {
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if err := ctx.Err(); err != nil {
			return err
		}
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return errors.New("no answer from " + url)
}

// nginxTop and nginxServer are what both nginx configurations share: the
// process settings, and the start of an http block's settings and server
// (the worker count is the first argument, the directory the second, the
// address the third).
const nginxTop = `worker_processes %d;
worker_rlimit_nofile 16384;
pid %[2]s/nginx.pid;
error_log %[2]s/error.log warn;
daemon off;
events { worker_connections 8192; }
`

const nginxServer = `  client_body_temp_path %[2]s/tmp;
  proxy_temp_path %[2]s/tmp;
  fastcgi_temp_path %[2]s/tmp;
  uwsgi_temp_path %[2]s/tmp;
  scgi_temp_path %[2]s/tmp;
  keepalive_requests 1000000;
  server {
    listen %[3]s;
    location = /json {
      default_type application/json;
      return 200 '{"message":"Hello, World!"}';
    }
`

const nginxConf = nginxTop + `http {
  access_log %[2]s/access.log combined buffer=64k flush=100ms;
` + nginxServer + `    location /lib/ {
      alias %[5]s/;
      default_type application/javascript;
    }
    location = /callback {
      default_type application/json;
      return 200 '{"ok":"ok"}';
    }
    location /api/ {
      default_type application/javascript;
      return 200 '%[4]s';
    }
  }
}
`

// startNginx runs the reference: nginx answering every /api/ path with the
// id-1 body and /json with the hello body, with a buffered access log. It
// returns the pid of nginx's master.
func startNginx(ctx context.Context, p *procs, dir, addr string, workers int) (int, error) {
	staticDir := filepath.Join(filepath.Dir(dir), "static")
	return runNginx(ctx, p, dir, addr, fmt.Appendf(nil, nginxConf, workers, dir, addr, wantBody, staticDir))
}

// runNginx writes conf into dir and runs nginx on it until it answers /json
// on addr. It returns the pid of nginx's master (daemon off: the process
// started).
func runNginx(ctx context.Context, p *procs, dir, addr string, conf []byte) (int, error) {
	if err := os.MkdirAll(filepath.Join(dir, "tmp"), 0o755); err != nil {
		return 0, err
	}
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, conf, 0o644); err != nil {
		return 0, err
	}
	cmd := exec.Command("nginx", "-c", path, "-p", dir)
	cmd.Stderr = os.Stderr
	if err := p.start(cmd); err != nil {
		return 0, fmt.Errorf("nginx (%s): %w", path, err)
	}
	return cmd.Process.Pid, waitHTTP(ctx, "http://"+addr+"/json")
}

// nginxLuaConf is seed 004's stack doing sample3's job: OpenResty's Lua
// module (Debian's libnginx-mod-http-lua) answering from a lua_shared_dict
// filled with the demo placements at start, the callback checked with the
// same rule as Tsubame's, no access log (sample3 keeps none).
const nginxLuaConf = `load_module /usr/lib/nginx/modules/ndk_http_module.so;
load_module /usr/lib/nginx/modules/ngx_http_lua_module.so;
` + nginxTop + `http {
  access_log off;
  lua_shared_dict placements 16m;
  init_by_lua_block {
    local d = ngx.shared.placements
    for n = 1, 1000 do
      d:set(tostring(n), '{"urls":["http://ad' .. (2*n-1) .. '.example.com/tag.js","http://ad' .. (2*n) .. '.example.com/tag.js"]}')
    end
  }
` + nginxServer + `    location /api/ {
      default_type "application/javascript; charset=utf-8";
      content_by_lua_block {
        local args = ngx.req.get_uri_args()
        local cb = args.callback
        if type(cb) ~= "string" or #cb > 256 or not ngx.re.find(cb, [[^[A-Za-z_$][\w$]*(?:\.[A-Za-z_$][\w$]*)*$]], "jo") then
          ngx.status = 400
          ngx.say("bad callback")
          return
        end
        local v = ngx.shared.placements:get(args.id or "")
        if not v then
          ngx.status = 404
          v = '{"urls":[]}'
        end
        ngx.print(cb, "(", v, ");")
      }
    }
  }
}
`

// startNginxLua runs nginx + Lua (nginxLuaConf) on addr.
func startNginxLua(ctx context.Context, p *procs, dir, addr string, workers int) error {
	_, err := runNginx(ctx, p, dir, addr, fmt.Appendf(nil, nginxLuaConf, workers, dir, addr))
	return err
}

// startPeer builds bench/peer and runs it on addr with the given engine.
func startPeer(ctx context.Context, p *procs, dir, engine, addr string) error {
	bin := filepath.Join(dir, "peer")
	if _, err := os.Stat(bin); err != nil {
		build := exec.Command("go", "build", "-trimpath", "-o", bin, "./bench/peer")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("building bench/peer: %w", err)
		}
	}
	cmd := exec.Command(bin, "-engine", engine, "-addr", addr)
	cmd.Stderr = os.Stderr
	if err := p.start(cmd); err != nil {
		return fmt.Errorf("peer %s: %w", engine, err)
	}
	return waitHTTP(ctx, "http://"+addr+"/api/sample3.js?id=1&callback=cb")
}

// startTsubame runs the binary with the built-in defaults on loopback
// ports, its data and logs in dir, loaded with the demo placements, its
// webhook messages sent to the fake API at apiURL.
func startTsubame(ctx context.Context, p *procs, bin, dir, addr, admin, apiURL string, env ...string) (*exec.Cmd, error) {
	cmd := exec.Command(bin, "serve", "-demo")
	cmd.Env = append(os.Environ(),
		"TSUBAME_LISTEN="+addr,
		"TSUBAME_ADMIN_LISTEN="+admin,
		"TSUBAME_DATA_DIR="+filepath.Join(dir, "data"),
		"TSUBAME_ACCESS_LOG_DIR="+filepath.Join(dir, "logs"),
		"TSUBAME_LOG_LEVEL=error",
		"TSUBAME_ADMIN_METRICS_PUBLIC=true", // scraped for the webhook counters; loopback only
		"TSUBAME_WEBHOOK_API_URL="+apiURL,
		"TSUBAME_WEBHOOK_API_H2C=true",
		"TSUBAME_STATIC_ROOT="+filepath.Join(filepath.Dir(dir), "static"),
	)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = os.Stderr
	if err := p.start(cmd); err != nil {
		return nil, fmt.Errorf("tsubame: %w", err)
	}
	return cmd, waitHTTP(ctx, "http://"+addr+"/json")
}

// writeStatic creates the file of the static scenario, served by both.
func writeStatic(dir string) error {
	if err := os.MkdirAll(filepath.Join(dir, "static"), 0o755); err != nil {
		return err
	}
	var b strings.Builder
	for i := 0; b.Len() < 20<<10; i++ {
		fmt.Fprintf(&b, "function f%d(a, b) { return a * %d + b; }\n", i, i)
	}
	return os.WriteFile(filepath.Join(dir, "static", "app.js"), []byte(b.String()), 0o644)
}

// startRedis runs a redis-server for the Redis scenarios, persistence off.
func startRedis(ctx context.Context, p *procs, dir, addr string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	host, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command("redis-server", "--bind", host, "--port", port, "--dir", dir, "--save", "", "--appendonly", "no",
		"--logfile", filepath.Join(dir, "redis.log"))
	if err := p.start(cmd); err != nil {
		return fmt.Errorf("redis-server: %w", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if err := ctx.Err(); err != nil {
			return err
		}
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return errors.New("redis-server did not start")
}

// raiseFileLimit lets wrk and the servers (which inherit it) hold 3000+ connections.
func raiseFileLimit() {
	var rl syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl) == nil && rl.Cur < 65536 {
		rl.Cur = min(rl.Max, 65536)
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl)
	}
}
