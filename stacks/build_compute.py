"""The CodeBuild compute type of the image build: the largest one the plan's region offers.

A project whose compute type the region does not offer fails its create. BUILD_GENERAL1_2XLARGE (72 vCPUs,
145 GB, 824 GB SSD; Docker images up to 100 GB) "is available only in Regions" the CodeBuild User Guide lists
(awsdocs/aws-codebuild-user-guide, doc_source/build-env-ref-compute-types.md, "Build environment compute types"
note; the current page, https://docs.aws.amazon.com/codebuild/latest/userguide/build-env-ref-compute-types.html,
keeps 2XLarge out of its "available in all Regions" footnote). Europe (Spain), the seed's region, is not among
them: there the build runs on BUILD_GENERAL1_LARGE (8 vCPUs, 15 GB, 128 GB), which the guide lists with no
Region limit. A region missing here gets LARGE: slower, never a failed create.
"""

from __future__ import annotations

from aws_cdk import aws_codebuild as codebuild

# The guide's list, as Region codes (US East (N. Virginia) ... China (Ningxia)).
X2_LARGE_REGIONS = frozenset(
    {
        "us-east-1",
        "us-east-2",
        "us-west-1",
        "us-west-2",
        "ca-central-1",
        "sa-east-1",
        "eu-north-1",
        "eu-west-1",
        "eu-west-2",
        "eu-west-3",
        "eu-central-1",
        "me-south-1",
        "ap-east-1",
        "ap-northeast-1",
        "ap-northeast-2",
        "ap-southeast-1",
        "ap-southeast-2",
        "ap-south-1",
        "cn-north-1",
        "cn-northwest-1",
    }
)


def compute_type(region: str) -> codebuild.ComputeType:
    return codebuild.ComputeType.X2_LARGE if region in X2_LARGE_REGIONS else codebuild.ComputeType.LARGE
