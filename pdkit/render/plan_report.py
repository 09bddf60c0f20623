"""`pdkit plan` output: the plan as an operator reads it before paying for a block."""

from __future__ import annotations

import json

from pdkit.model.plan import ROOT_VOLUME_INITIALIZATION_MIBPS, Plan, RolePlan


def as_json(plan: Plan) -> str:
    return json.dumps(plan.to_dict(), indent=2, sort_keys=True)


def as_text(plan: Plan, *, next_step: str = "make synth   (then `pdkit capacity offerings` when you are ready to buy a block)") -> str:
    it, m, est = plan.instance, plan.model, plan.estimates
    reservation = (
        f"{plan.reservation_label} (capacity.purchase: USD {plan.purchase.upfront_fee_usd:,.2f} for "
        f"{plan.purchase.instance_hours} instance-hours, confirmed by `make deploy`)"
        if plan.purchase
        else f"{plan.reservation_id} (placeholder: synth only, the deploy guard refuses it)"
        if plan.reservation_is_placeholder
        else plan.reservation_id
    )
    lines = [
        f"Deployment {plan.name}  (profile {plan.profile_path})",
        "",
        f"  Capacity Block   {plan.instance_count} x {it.name} in {plan.block_az} ({plan.region}), reservation {reservation}"
        if plan.market == "capacity-block"
        else f"  On-demand        {plan.instance_count} x {it.name} in {plan.block_az} ({plan.region}), no reservation: "
        f"a rehearsal of {plan.rehearses or 'a block profile'} (runbooks/00b-rehearsal.md)",
        f"  Per node         {it.gpus} x {it.gpu_model} ({it.gpu_memory_gb:.1f} GB each), {plan.efa_devices_per_node} EFA devices on {it.network_cards} network cards, {it.nvme_gb / 1000:.1f} TB NVMe",
        f"  Placement group  {_placement(plan)}",
        f"  Network          private subnets in {', '.join(plan.availability_zones)}; GPU nodes only in {plan.block_az}",
        f"  Model            {m.id}: {m.total_params_b:g}B total / {m.active_params_b:g}B active, {m.routed_experts} experts top-{m.experts_per_token}, {m.moe_layers} MoE layers, ~{m.checkpoint_gb:g} GB of weights",
        "",
        _role_table(plan),
        "",
        f"  Decode: {plan.decode.cross_node_moe_messages_per_token} cross-node MoE messages per token ({m.moe_layers} MoE layers x dispatch+combine)"
        + (", the latency-critical path on EFA." if plan.decode.ep_spans_nodes else "; the EP group stays inside one node."),
        f"  Prefill: {plan.prefill.pp_transfers_per_chunk} pipeline send/recv per chunk across nodes, {plan.prefill.cross_node_moe_messages_per_token} cross-node MoE messages.",
        "",
        *_memory_lines(plan),
        "",
        "  Images           " + ", ".join(f"{i.repository}:{i.tag}" for i in plan.images.values()),
        "",
        "  Estimates (assumptions in pdkit/model/plan.py):",
        f"    weights staging S3 -> NVMe  ~{est.staging_minutes:g} min per node, load ~{est.load_minutes:g} min, warm-boot budget {est.startup_budget_minutes:g} min",
        f"    first boot (cold compile caches)  DeepGEMM precompile ~{est.precompile_minutes:g} min, then the start-up probes allow "
        f"{est.first_boot_budget_minutes:g} min; the warm cache is saved to s3://<weights bucket>/{plan.weights.compile_cache_prefix}{plan.name}/ at drain",
        _image_line(plan),
    ]
    if est.gpu_cost_per_hour_usd is not None:
        lines.append(
            f"    GPU cost  ${est.gpu_cost_per_hour_usd:,.2f}/hour, ${est.block_cost_usd:,.2f} for the {plan.block_duration_hours} h block"
        )
    else:
        lines.append("    GPU cost  set capacity.hourly_price_usd to see it (the block's upfront fee / hours / instances)")
    if not plan.cluster_access.admin_principal_arns:
        lines += [
            "",
            "  Warning: cluster.admin_principal_arns is empty. The cluster grants no one admin (creator admin is off on purpose),",
            "  so kubectl and `pdkit status` will be refused. Add your role ARN, e.g. arn:aws:iam::<account>:role/<your-role>.",
        ]
    for warning in (*plan.placement_warnings, *plan.serving_warnings):
        lines += ["", f"  Warning: {warning}."]
    lines += ["", f"Next: {next_step}"]
    return "\n".join(lines)


def _placement(plan: Plan) -> str:
    """How the placement the user asked for is met (README, "Placement")."""
    if plan.placement_group == "cluster":
        return "cluster (a cluster placement group in the GPU launch template)"
    if plan.market == "capacity-block":
        return "none: the block's own (EC2 places a Capacity Block's instances together; checked at delivery from the instance topology)"
    return "none"


def _memory_lines(plan: Plan) -> list[str]:
    """Per GPU, per role: the static pool SGLang sizes from --mem-fraction-static, and what must stay outside it."""
    lines = [f"  Memory per GPU ({plan.instance.gpu_memory_gb:.1f} GB; model and sources in pdkit/model/gpu_memory.py):"]
    for r in plan.roles.values():
        b = r.memory
        source = (
            f"derived {b.mem_fraction_derived:.2f}"
            if b.mem_fraction_static == b.mem_fraction_derived
            else f"profile override, the model derives {b.mem_fraction_derived:.2f}"
        )
        draft = f" + MTP draft {b.draft_weights_gb:.1f}" if b.draft_weights_gb else ""
        graphs = f"CUDA graphs {b.cuda_graphs_gb:.1f}" + (
            f" ({len(b.decode_graph_bs)} decode sizes up to {max(b.decode_graph_bs)} per rank)" if b.decode_graph_bs else " (prefill)"
        )
        headroom = f" + capture headroom {b.capture_headroom_gb:.1f}" if b.capture_headroom_gb else ""
        draft_graphs = f" + MTP draft graphs {b.draft_graphs_gb:.1f}" if b.draft_graphs_gb else ""
        lines += [
            f"    {r.name:<8} mem_fraction_static {b.mem_fraction_static:.2f} ({source}), {r.a2a_backend} {r.deepep_mode or ''}".rstrip(),
            f"             static: weights {b.weights_gb:.1f}{draft} + KV {b.kv_gb:.1f} GB",
            f"             reserve {b.reserve_gb:.1f} GB: runtime {b.runtime_gb:.1f} + {graphs} + EP buffers {b.ep_buffers_gb:.1f}{headroom}{draft_graphs}",
            "             derived by backend: " + ", ".join(f"{name} {value:.2f}" for name, value in b.derived_by_backend.items()),
        ]
    return lines


def _image_line(plan: Plan) -> str:
    minutes = plan.estimates.image_ready_minutes
    return (
        f"    serving image on a new node  ~{minutes['eks-optimized']:g} min pulled from ECR (eks-optimized), "
        f"~{minutes['custom']:g} min pre-pulled in the custom AMI (root restored at {ROOT_VOLUME_INITIALIZATION_MIBPS} MiB/s); "
        f"this profile: {plan.ami_source}"
    )


def _role_table(plan: Plan) -> str:
    head = (
        "role",
        "nodes",
        "GPUs",
        "tp",
        "pp",
        "ep",
        "attn",
        "experts/GPU",
        "weights/GPU",
        "KV/GPU",
        "KV tokens/GPU",
        "MoE a2a (image)",
        "DeepEP mode",
    )
    rows = [head] + [_row(r) for r in plan.roles.values()]
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    return "\n".join("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows)


def _row(r: RolePlan) -> tuple[str, ...]:
    attn = f"cp{r.attn_cp}" if r.attn_cp > 1 else f"dp{r.attn_dp}" if r.attn_dp > 1 else f"tp{r.attn_tp}"
    return (
        r.name,
        f"{r.replicas}x{r.nodes_per_replica}",
        str(r.gpus),
        str(r.tp),
        str(r.pp),
        str(r.ep),
        attn,
        f"{r.experts_per_gpu:g}",
        f"{r.weights_gb_per_gpu:.1f} GB",
        f"{r.kv_budget_gb_per_gpu:.1f} GB",
        f"{r.kv_tokens_per_gpu:,}",
        f"{r.a2a_backend} ({r.image})",
        r.deepep_mode or "-",
    )
