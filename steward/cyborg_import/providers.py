"""The import's one Placement write: Steward adopts Cyborg's resource providers,
through the Placement client it is handed.
"""
import os_traits

from steward.common import exception


def adopt_providers(placement, data, dry_run, result):
    """Add OWNER_CYBORG to every imported deployable's provider that lacks it; the
    import's only Placement write. Through PlacementClient.add_traits, not
    sync_provider(): that one would also rewrite names, inventories and reserved."""
    for row in data['deployables']:
        rp = row.get('rp_uuid')
        if not rp:
            continue
        try:
            traits = placement.get_traits(rp)
        except exception.PlacementError as err:
            if getattr(err, 'http_status', None) == 404:
                result.warnings.append(f'deployable {row["name"]}: its provider {rp} is '
                                       f'not in Placement; Steward creates it at the '
                                       f'first discovery')
            else:
                result.conflicts.append(f'provider {rp} of {row["name"]}: {err}')
            continue
        if os_traits.OWNER_CYBORG in traits:
            continue
        result.lines.append(f'provider {rp} ({row["name"]}): add trait OWNER_CYBORG to '
                            f'{sorted(traits)}')
        if dry_run:
            continue
        if placement.add_traits(rp, {os_traits.OWNER_CYBORG}):
            result.placement_writes += 1
