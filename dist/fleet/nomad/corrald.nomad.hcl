# corrald as a Nomad system job: one corrald on every Nomad client meant for sandboxes, all of
# them nodes of one corral fleet (docs/FLEET.md, "Deploying").
#
#   nomad var put nomad/jobs/corrald store_url=@store-url cluster_secret=@cluster-secret \
#       relay_api_key=@relay-api-key
#   nomad job run dist/fleet/nomad/corrald.nomad.hcl
#
# Written for Nomad 1.8 or newer (Nomad variables, Nomad's own service checks, the template's
# uid/gid, raw_exec's oom_score_adj).
#
# What each client needs before this job can run there:
#   - corral's Debian package installed (dist/install.cmake: /usr/bin/corrald, corral-init in
#     /usr/libexec/corral, the `corral` admin command), and its systemd unit left DISABLED: Nomad
#     runs corrald instead of systemd, and two corralds cannot share /var/lib/corral (the second
#     refuses to start). `systemctl disable --now corrald` if it was enabled.
#   - the raw_exec driver enabled in the client's config (it is off by default):
#       plugin "raw_exec" { config { enabled = true } }
#   - client metadata marking it for corral (the constraint below):
#       client { meta { corral = "true" } }
#   - `corral doctor` passing on the host (kernel, cgroups, user namespaces, the state dir's
#     file system).
#
# Why raw_exec, and not docker or exec: corrald is the isolation. It must be root with every
# capability it uses, in the host's PID, network, mount and cgroup namespaces, to make each
# sandbox's namespaces, cgroups, mounts and loop devices, and its sandboxes must outlive it across a
# restart (a new corrald adopts them). The exec driver puts its task in a chroot and namespaces of
# Nomad's, which would be the sandboxes' too; the docker driver could run it privileged with the
# host's namespaces, /sys/fs/cgroup and /dev bind-mounted, but that is a container in name only,
# with a Docker daemon beside it that corral does not otherwise need. raw_exec runs the package's
# /usr/bin/corrald on the host exactly as its systemd unit would (dist/corrald.service); what the
# unit does for it, this job does below (signals, restarts, health, the OOM score).
#
# What runs where: corrald itself, and its helpers (mkfs.ext4, skopeo for image pulls, git), are
# in the cgroup Nomad gives this task. The sandboxes are not: they go to a cgroup of corrald's own,
# /sys/fs/cgroup/corral/<id> (daemon.cgroup_parent below), so stopping or restarting this task
# never stops them, and Nomad does not count their memory. Reserve it on these clients
# (client { reserved { memory = ... cpu = ... } }, or a node pool for corral alone), or Nomad will
# place other jobs on memory the sandboxes use.

job "corrald" {
  # One allocation per eligible client, on every client that joins later too.
  type = "system"

  # datacenters = ["*"]   # Nomad's default: every datacenter. Narrow it here if need be.
  # node_pool = "corral"  # or a node pool of corral's clients alone

  # Linux only: corrald is Linux namespaces and cgroups.
  constraint {
    attribute = "${attr.kernel.name}"
    value     = "linux"
  }

  # Only the clients the operator marked for sandboxes (client { meta { corral = "true" } }).
  constraint {
    attribute = "${meta.corral}"
    value     = "true"
  }

  # Node by node: a change to this job (a new config, a new version to run) replaces one
  # allocation at a time, and the next only once the new one has passed its /healthz check for
  # min_healthy_time. (Nomad versions before system-job deployments enforce max_parallel and
  # stagger only.) No auto_revert: once a newer corrald has migrated the database, an older one
  # refuses to start on it (docs/FLEET.md, "Upgrading node by node"), so going back is restoring
  # the database's backup, not reverting the job.
  update {
    max_parallel     = 1
    stagger          = "30s"
    health_check     = "checks"
    min_healthy_time = "30s"
    healthy_deadline = "10m"
  }

  group "corrald" {
    # corrald's API, on the host's network (raw_exec has no network namespace): clients through
    # the load balancer, and the other nodes forwarding to this one (node.address), reach it here.
    # Static: every node's address is IP:7878, which the load balancer's list can name.
    network {
      port "api" {
        static = 7878
      }
    }

    # As the unit's Restart=on-failure: a crash restarts corrald, which adopts the sandboxes. A
    # start that keeps failing (a bad config, PostgreSQL unreachable at start) is retried slowly.
    restart {
      attempts = 5
      interval = "10m"
      delay    = "5s"
      mode     = "delay"
    }

    # Registered in Nomad's own service catalog (no Consul needed), with the health check that
    # gates the node-by-node update. GET /healthz needs no token and answers 200 once corrald
    # listens, which it does only after its recovery (adopting the running sandboxes). It does not
    # ask PostgreSQL: a node whose database is unreachable stays up, serves running commands, and
    # answers 503 with Retry-After to what needs the store.
    service {
      provider = "nomad"
      name     = "corrald"
      port     = "api"

      check {
        type     = "http"
        path     = "/healthz"
        interval = "10s"
        timeout  = "3s"

        # A corrald that stops answering (a wedged event loop: the unit's watchdog) is
        # restarted; its sandboxes keep running.
        check_restart {
          limit = 3
          grace = "60s"
        }
      }
    }

    task "corrald" {
      driver = "raw_exec"

      config {
        command = "/usr/bin/corrald"
        args    = ["--config", "${NOMAD_TASK_DIR}/corrald.toml", "--foreground"]
        # Not the Nomad agent's (often -1000 under systemd): every sandbox's corral-init and
        # commands inherit it, and it would shield them from the OOM killer (the unit sets none).
        oom_score_adj = 0
      }

      # SIGTERM: corrald closes its connections (WebSockets with 1001, so that clients reconnect
      # through another node and resume) and writes what it holds; the sandboxes keep running.
      # 30 s is far more than it takes, as the unit's TimeoutStopSec.
      kill_signal  = "SIGTERM"
      kill_timeout = "30s"

      # corrald.toml, rendered on each client. Every key is one of dist/corrald.toml, which says
      # what each does; the rest keep their defaults.
      template {
        destination = "local/corrald.toml"
        perms       = "0644"
        # A change is applied as `systemctl reload corrald` would: what can change at run time
        # does (limits, prices, egress rules); the log names the keys that need a restart
        # (listeners, paths, [store], [node]), which `nomad alloc restart` then applies.
        change_mode   = "signal"
        change_signal = "SIGHUP"
        data          = <<-EOT
        [daemon]
        # The host's own directories, as under systemd: the store's local files, the sandboxes'
        # layers and snapshots (0700, root's), and their control sockets.
        state_dir = "/var/lib/corral"
        run_dir = "/run/corral"
        # Sandboxes' cgroups at /sys/fs/cgroup/corral/<id>, beside Nomad's cgroups, not in this
        # task's: a restart of the task leaves them running. (Under systemd corrald would start a
        # scope of its own; under Nomad it is not a systemd service.)
        cgroup_parent = "corral"

        [api]
        # The node's private address: for the load balancer and the other nodes, not the
        # internet (between nodes the traffic is plain HTTP). TLS is the load balancer's.
        listen = "{{ env "attr.unique.network.ip-address" }}:{{ env "NOMAD_PORT_api" }}"

        [store]
        backend = "postgresql"
        url_file = "{{ env "NOMAD_SECRETS_DIR" }}/store-url"

        [node]
        # The Nomad client's name: unique in the cluster and stable across restarts, as a node's
        # id must be (letters, digits, '.', '-', '_'; at most 64 characters).
        id = "{{ env "node.unique.name" }}"
        # Where the other nodes forward requests for what this node holds.
        address = "{{ env "attr.unique.network.ip-address" }}:{{ env "NOMAD_PORT_api" }}"
        cluster_secret_file = "{{ env "NOMAD_SECRETS_DIR" }}/cluster-secret"

        [relay]
        api_key_file = "{{ env "NOMAD_SECRETS_DIR" }}/relay-api-key"

        # The model relay refuses every model it has no price for: copy yours from your
        # contract, the same on every node, e.g.
        # [relay.prices."claude-sonnet-5-5"]
        # input = 3
        # output = 15
        # cache_write = 3.75
        # cache_read = 0.30
        EOT
      }

      # The secrets, from the Nomad variable nomad/jobs/corrald (a task may read its own job's
      # variables without an ACL policy of its own). Each is a file of root's, mode 0600, in the
      # task's secrets directory: corrald refuses a secret file that anyone but root may read.
      # With Vault instead, a `vault {}` block in this task and, in each template,
      #   {{ with secret "kv/data/corral" }}{{ .Data.data.store_url }}{{ end }}
      #
      # The PostgreSQL connection string (libpq's), e.g.
      # postgresql://corral:PASSWORD@db.internal:5432/corral?sslmode=verify-full
      template {
        destination = "secrets/store-url"
        perms       = "0600"
        uid         = 0
        gid         = 0
        # A new secret needs a restart (corrald reads these files when it starts).
        change_mode = "restart"
        data        = <<-EOT
        {{ with nomadVar "nomad/jobs/corrald" }}{{ .store_url }}{{ end }}
        EOT
      }

      # The fleet's cluster secret: the same on every node, at least 32 bytes
      # (head -c 48 /dev/urandom | base64). Nodes mark the requests they forward with it.
      template {
        destination = "secrets/cluster-secret"
        perms       = "0600"
        uid         = 0
        gid         = 0
        change_mode = "restart"
        data        = <<-EOT
        {{ with nomadVar "nomad/jobs/corrald" }}{{ .cluster_secret }}{{ end }}
        EOT
      }

      # The operator's model API key, for the relay (never shown to a sandbox).
      template {
        destination = "secrets/relay-api-key"
        perms       = "0600"
        uid         = 0
        gid         = 0
        change_mode = "restart"
        data        = <<-EOT
        {{ with nomadVar "nomad/jobs/corrald" }}{{ .relay_api_key }}{{ end }}
        EOT
      }

      # corrald's own share and its helpers' (mkfs.ext4, a skopeo pull, a git bundle), not the
      # sandboxes': theirs is reserved on the client (above).
      resources {
        cpu    = 1000
        memory = 1024
      }
    }
  }
}
